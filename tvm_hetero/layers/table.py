"""The layers of a model as text: a fixed-width table, for the CLI and logs."""

from __future__ import annotations

from .extract import Layer, distinct_param_bytes


def layers_table(layers: list[Layer]) -> str:
    """A fixed-width text table of layers, for the CLI and logs."""
    rows = [("#", "layer", "kind", "ops", "output", "MFLOP", "params KiB", "act in/out KiB",
             "predecessors")]
    for layer in layers:
        out = ",".join("x".join(map(str, t.shape)) for t in layer.outputs)
        rows.append((str(layer.index), layer.name, layer.kind, "+".join(layer.op_kinds), out,
                     f"{layer.flops / 1e6:.2f}", f"{layer.param_bytes / 1024:.1f}",
                     f"{layer.activation_bytes_in / 1024:.1f}/"
                     f"{layer.activation_bytes_out / 1024:.1f}",
                     ",".join(layer.predecessors + layer.model_inputs) or "-"))
    widths = [min(max(len(r[i]) for r in rows), 40) for i in range(len(rows[0]))]

    def fmt(row):
        return "  ".join(cell[:40].ljust(w) for cell, w in zip(row, widths)).rstrip()

    total_flops = sum(layer.flops for layer in layers)
    total_params = distinct_param_bytes(layers)
    return "\n".join([fmt(rows[0])] + [fmt(r) for r in rows[1:]] + [
        f"{len(layers)} layers, {total_flops / 1e6:.1f} MFLOP, "
        f"{total_params / 2**20:.2f} MiB of parameters"])
