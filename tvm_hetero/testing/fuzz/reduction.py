"""A failing graph reduced (:class:`Reduction`), and the graph surgery that reduces it:
nodes deleted (their readers rewired to an earlier value, or their outputs made graph inputs),
outputs dropped, the graph cut after one value; every candidate valid or None."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .outcomes import Outcome, onnxruntime_outputs


@dataclass
class Reduction:
    """A failing graph reduced: the model, its inputs, and its outcomes."""

    seed: int
    run: str
    signature: str
    model: Any
    inputs: dict
    outcome: Outcome
    plain: Outcome
    checks: int
    original_nodes: int

    def describe(self) -> str:
        """One line per node: op, input shapes -> output shapes, attributes."""
        import onnx

        inferred = onnx.shape_inference.infer_shapes(self.model)
        shapes = {}
        for value in [*inferred.graph.input, *inferred.graph.value_info,
                      *inferred.graph.output]:
            dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
            shapes[value.name] = dims
        for init in self.model.graph.initializer:
            shapes[init.name] = list(init.dims)
        inits = {init.name for init in self.model.graph.initializer}
        lines = []
        for node in self.model.graph.node:
            ins = ", ".join(("const" if n in inits else "") + str(shapes.get(n, "?"))
                            for n in node.input if n)
            outs = ", ".join(str(shapes.get(n, "?")) for n in node.output)
            attrs = ", ".join(f"{a.name}={onnx.helper.get_attribute_value(a)}"
                              for a in node.attribute)
            lines.append(f"{node.op_type}({ins}) -> {outs}" + (f" [{attrs}]" if attrs else ""))
        return "\n".join(lines)

    def save(self, directory: str) -> str:
        """Write ``seed{S}_{run}_{status}.onnx`` (+ ``.npz`` inputs, ``.json`` summary)."""
        import onnx

        os.makedirs(directory, exist_ok=True)
        stem = os.path.join(directory, f"seed{self.seed}_{self.run}_{self.outcome.status}")
        onnx.save(self.model, stem + ".onnx")
        np.savez(stem + ".npz", **self.inputs)
        summary = {"seed": self.seed, "run": self.run, "signature": self.signature,
                   "nodes": len(self.model.graph.node), "original_nodes": self.original_nodes,
                   "checks": self.checks, "ours": asdict(self.outcome),
                   "plain": asdict(self.plain), "graph": self.describe().splitlines()}
        with open(stem + ".json", "w") as file:
            json.dump(summary, file, indent=1, default=str)
        return stem + ".onnx"


# ----------------------------------------------------------------------------------------------
# graph surgery for the reduction


def _valid(model) -> bool:
    import onnx

    try:
        onnx.checker.check_model(model, full_check=True)
        onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except Exception:  # noqa: BLE001
        return False
    return True


def _prune(model):
    """Drop nodes no output needs, then unused initializers and graph inputs; None if the
    graph has no output left or is invalid."""
    import onnx

    graph = model.graph
    if not graph.output:
        return None
    needed = {o.name for o in graph.output}
    keep = []
    for node in reversed(graph.node):
        if any(o in needed for o in node.output):
            keep.append(node)
            needed.update(n for n in node.input if n)
    keep.reverse()
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(keep)
    inits = [i for i in graph.initializer if i.name in needed]
    del out.graph.initializer[:]
    out.graph.initializer.extend(inits)
    inputs = [i for i in graph.input if i.name in needed]
    del out.graph.input[:]
    out.graph.input.extend(inputs)
    del out.graph.value_info[:]
    produced = {o for n in keep for o in n.output}
    if not produced & {o.name for o in out.graph.output}:
        return None  # every output would be a graph input or a constant
    return out if _valid(out) else None


def keep_outputs(model, names: list[str]):
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    outputs = [o for o in model.graph.output if o.name in names]
    del out.graph.output[:]
    out.graph.output.extend(outputs)
    return _prune(out)


def cut_at(model, name: str):
    """The graph computing only `name` (its one output)."""
    import onnx

    try:
        info = _value_infos(model)[name]
    except Exception:  # noqa: BLE001
        return None
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.output[:]
    out.graph.output.append(info)
    return _prune(out)


def used_inputs(model, inputs: dict) -> dict:
    names = {i.name for i in model.graph.input}
    return {k: v for k, v in inputs.items() if k in names}


def _value_infos(model) -> dict[str, Any]:
    """Every value's ValueInfoProto (inputs, intermediates, outputs) by name."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    return {v.name: v for v in [*inferred.graph.input, *inferred.graph.value_info,
                                *inferred.graph.output]}


def _intermediates(model, inputs: dict, names: list[str]) -> dict[str, np.ndarray]:
    """onnxruntime's values of intermediate tensors."""
    import onnx

    infos = _value_infos(model)
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    existing = {o.name for o in probe.graph.output}
    probe.graph.output.extend(infos[n] for n in names if n not in existing)
    out_names = [o.name for o in probe.graph.output]
    values = onnxruntime_outputs(probe, inputs)
    return {n: v for n, v in zip(out_names, values) if n in names}


def deletions(model, inputs: dict, index: int):
    """Graphs without node `index`: its outputs' readers rewired to an earlier value of the
    same type and shape (its own inputs first), or its outputs made graph inputs (fed what
    onnxruntime computed for them)."""
    import onnx

    try:
        infos = _value_infos(model)
    except Exception:  # noqa: BLE001
        return
    node = model.graph.node[index]
    outputs = [o for o in node.output if o]

    def type_of(name):
        info = infos.get(name)
        return None if info is None else info.type.SerializeToString()

    earlier = [n for n in node.input if n] + [i.name for i in model.graph.input]
    for prior in model.graph.node[:index]:
        earlier.extend(prior.output)
    replacement = {}
    for out in outputs:
        match = next((e for e in dict.fromkeys(earlier) if type_of(e) is not None
                      and type_of(e) == type_of(out)), None)
        if match is None:
            break
        replacement[out] = match
    else:
        candidate = _rewired(model, index, replacement)
        if candidate is not None:
            yield candidate, used_inputs(candidate, inputs)
    # the node's outputs as graph inputs
    try:
        values = _intermediates(model, inputs, outputs)
    except Exception:  # noqa: BLE001
        return
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[index]
    graph_outputs = [o for o in out.graph.output if o.name not in outputs]
    del out.graph.output[:]
    out.graph.output.extend(graph_outputs)
    out.graph.input.extend(infos[o] for o in outputs)
    candidate = _prune(out)
    if candidate is not None:
        new_inputs = dict(inputs)
        new_inputs.update(values)
        yield candidate, used_inputs(candidate, new_inputs)


def _rewired(model, index: int, replacement: dict[str, str]):
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[index]
    for node in out.graph.node:
        node.input[:] = [replacement.get(n, n) for n in node.input]
    graph_inputs = {i.name for i in out.graph.input}
    outputs, seen = [], set()
    for value in out.graph.output:
        name = replacement.get(value.name, value.name)
        if name in graph_inputs or name in seen:
            continue  # an output that would only echo an input (or another output)
        seen.add(name)
        new = onnx.ValueInfoProto()
        new.CopyFrom(value)
        new.name = name
        outputs.append(new)
    del out.graph.output[:]
    out.graph.output.extend(outputs)
    return _prune(out)


__all__ = ["Reduction", "cut_at", "deletions", "keep_outputs", "used_inputs"]
