"""Reports: a per-layer table, plots of the placement and of the search, a markdown page.

``write_report(out_dir, model, devices, records)`` reads a records file and writes

- ``report.md``: the best placement, its speedup, the candidates by outcome, the per-layer table
  (kind, FLOPs, parameters, device chosen, profiled cost on each device, bytes sent across);
- ``placement.png``: the layers in program order, one bar each (its profiled cost on its
  device, or its FLOPs without a profile), coloured by device, with every copy between devices
  marked;
- ``search.png``: the best latency so far against the number of candidates, one line per
  strategy found in the records.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from typing import Any

from .records import PlacementRecords
from ..devices import DeviceSet
from ..layers.extract import Layer
from ..build.memory import format_bytes
from ..placement import Placement

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]


def layer_rows(layers: list[Layer], placement: Placement, profile=None) -> list[dict[str, Any]]:
    """One row per layer: configuration, device, costs per device, bytes sent to others."""
    consumers: dict[str, set[str]] = defaultdict(set)
    for layer in layers:
        for pred in layer.predecessors:
            consumers[pred].add(placement[layer.name])
    rows = []
    for layer in layers:
        device = placement[layer.name]
        crossing = {d for d in consumers[layer.name] if d != device}
        rows.append({
            "layer": layer.name, "kind": layer.kind, "ops": "+".join(layer.op_kinds),
            "flops": layer.flops, "param_bytes": layer.param_bytes, "device": device,
            "cost_ms": dict(profile.layer_ms[layer.name]) if profile is not None else {},
            "bytes_sent": layer.activation_bytes_out * len(crossing),
            "sent_to": sorted(crossing),
        })
    return rows


def _colors(devices: DeviceSet) -> dict[str, str]:
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(devices.names)}


def plot_placement(layers: list[Layer], placement: Placement, devices: DeviceSet, path: str,
                   profile=None, title: str = "") -> str:
    """The layers along their order, coloured by device, copies marked (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from matplotlib.lines import Line2D

    colors = _colors(devices)
    index = {layer.name: i for i, layer in enumerate(layers)}
    if profile is not None:
        heights = [profile.layer_ms[l.name][placement[l.name]] for l in layers]
        ylabel = "profiled cost on its device (ms)"
    else:
        heights = [l.flops / 1e6 for l in layers]
        ylabel = "MFLOP"
    top = max(heights) if heights and max(heights) > 0 else 1.0
    width = max(8.0, min(0.28 * len(layers) + 4, 30.0))
    fig, ax = plt.subplots(figsize=(width, 4.8))
    layer_colors = [colors[placement[l.name]] for l in layers]
    ax.bar(range(len(layers)), heights, color=layer_colors, edgecolor="black", linewidth=0.4)
    # a strip below the axis shows every layer's device, also where its bar is too small to see
    ax.bar(range(len(layers)), [top * 0.05] * len(layers), bottom=-top * 0.07,
           color=layer_colors, width=1.0)
    copies = 0
    for layer in layers:
        for pred in layer.predecessors:
            if placement[pred] != placement[layer.name]:
                copies += 1
                ax.annotate("", xy=(index[layer.name], top * 1.06),
                            xytext=(index[pred], top * 1.06),
                            arrowprops={"arrowstyle": "->", "color": "black", "lw": 0.9,
                                        "connectionstyle": "arc3,rad=-0.35"})
    ax.axhline(0, color="black", lw=0.6)
    ax.set_ylim(-top * 0.08, top * 1.4)
    ax.set_xlim(-0.6, len(layers) - 0.4)
    ax.set_xticks(range(len(layers)))
    ax.set_xticklabels([l.name for l in layers], rotation=90,
                       fontsize=7 if len(layers) > 30 else 8)
    ax.set_ylabel(ylabel)
    ax.set_xlabel("layers in program order")
    handles = [Patch(color=colors[d], label=d) for d in devices.names
               if d in placement.assignment.values()]
    handles.append(Line2D([0], [0], color="black", lw=0.9, marker=">", markersize=5,
                          label=f"copy between devices ({copies})"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8,
              frameon=False)
    ax.set_title(title or "placement")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_history(series: dict[str, list[float]], path: str, title: str = "",
                 reference: tuple[str, float] | None = None) -> str:
    """Best latency so far against the candidates evaluated, one line per strategy (PNG)."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for i, (name, history) in enumerate(series.items()):
        points = [(n + 1, v) for n, v in enumerate(history) if math.isfinite(v)]
        if points:
            xs, ys = zip(*points)
            ax.step(xs, ys, where="post", label=name, color=PALETTE[i % len(PALETTE)], lw=1.8)
    if reference is not None:
        ax.axhline(reference[1], color="gray", ls="--", lw=1, label=reference[0])
    ax.set_xlabel("candidates evaluated")
    ax.set_ylabel("best verified latency so far (ms)")
    ax.set_title(title or "search progress")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def history_by_strategy(database: PlacementRecords) -> dict[str, list[float]]:
    """Best-so-far per strategy, from the records in file order."""
    best: dict[str, float] = {}
    series: dict[str, list[float]] = defaultdict(list)
    for placement, result in database.records():
        strategy = database.tags(placement).get("strategy", "records")
        best[strategy] = min(best.get(strategy, float("inf")), result.median_ms)
        series[strategy].append(best[strategy])
    return dict(series)


def write_report(out_dir: str, model, devices: DeviceSet, records: str, profile=None,
                 layers: list[Layer] | None = None) -> dict[str, Any]:
    """Write ``report.md``, ``placement.png`` and ``search.png`` for a records file.

    `layers` are the model's layers for `devices` (by default extracted with
    ``PrepareConfig.for_devices(devices)``, as the search measured them).

    Returns
    -------
    dict
        Paths written and the summary (best placement, latency, speedup, outcomes).
    """
    from ..errors import HeteroError
    from ..layers.extract import extract_layers
    from ..prepare import PrepareConfig

    layers = layers or extract_layers(model, PrepareConfig.for_devices(devices))
    database = PlacementRecords(records, model.fingerprint(), devices.fingerprint())
    best = database.best(layers, devices)
    if best is None:
        raise HeteroError(f"no verified record for {model.name} on {', '.join(devices.names)} "
                          f"in {records} ({len(database)} usable, {database.foreign_records} "
                          "of another model, device set or TVM version)")
    placement, latency = best
    os.makedirs(out_dir, exist_ok=True)
    # every figure from the measured placements within the caps, whatever their tags
    singles = [(p.devices_used[0], r) for p, r in database.valid(layers, devices)
               if len(p.devices_used) == 1]
    best_single = min(singles, key=lambda pr: pr[1].median_ms, default=None)
    outcomes = Counter(r.error.value for _, r in database.records())
    rows = layer_rows(layers, placement, profile)
    placement_png = plot_placement(
        layers, placement, devices, os.path.join(out_dir, "placement.png"), profile,
        f"{model.name}: best placement, {latency.median_ms:.3f} ms")
    search_png = plot_history(
        history_by_strategy(database), os.path.join(out_dir, "search.png"),
        f"{model.name} on {', '.join(devices.names)}",
        (f"best single device ({best_single[0]})", best_single[1].median_ms)
        if best_single else None)
    summary = {
        "model": model.name, "devices": devices.names, "records": records,
        "median_ms": latency.median_ms, "placement": placement.assignment,
        "best_single_device": {"device": best_single[0], "median_ms": best_single[1].median_ms}
        if best_single else None,
        "speedup": best_single[1].median_ms / latency.median_ms if best_single else None,
        "candidates": len(database), "outcomes": dict(outcomes),
        "layers": rows, "files": {"placement_plot": placement_png, "search_plot": search_png},
    }
    summary["files"]["report"] = _write_markdown(os.path.join(out_dir, "report.md"), summary,
                                                 devices)
    return summary


def _write_markdown(path: str, summary: dict[str, Any], devices: DeviceSet) -> str:
    lines = [f"# {summary['model']} on {', '.join(summary['devices'])}", ""]
    lines.append(f"- best verified placement: **{summary['median_ms']:.3f} ms**")
    single = summary["best_single_device"]
    if single:
        lines.append(f"- best single device: {single['device']} {single['median_ms']:.3f} ms; "
                     f"speedup **{summary['speedup']:.2f}x**")
    outcome = ", ".join(f"{k} {v}" for k, v in sorted(summary["outcomes"].items()))
    lines += [f"- candidates in the records: {summary['candidates']} ({outcome})",
              f"- records: `{summary['records']}`", "",
              "![placement](placement.png)", "", "![search](search.png)", "",
              "## Layers", ""]
    cost_cols = [f"{d} ms" for d in devices.names]
    lines.append("| # | layer | kind | MFLOP | params | device | " + " | ".join(cost_cols)
                 + " | sent across |")
    lines.append("|" + "---|" * (7 + len(cost_cols)))
    for i, row in enumerate(summary["layers"]):
        costs = [f"{row['cost_ms'][d]:.3f}" if d in row["cost_ms"] else "-"
                 for d in devices.names]
        sent = (f"{format_bytes(row['bytes_sent'])} to {', '.join(row['sent_to'])}"
                if row["sent_to"] else "")
        lines.append(f"| {i} | {row['layer']} | {row['kind']} | {row['flops'] / 1e6:.2f} | "
                     f"{format_bytes(row['param_bytes'])} | {row['device']} | "
                     + " | ".join(costs) + f" | {sent} |")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    return path
