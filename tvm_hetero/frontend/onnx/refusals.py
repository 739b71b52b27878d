"""What we refuse to import, with one clear line: out-of-scope ops (:data:`REFUSED_OPS`),
8-bit float and sub-byte types, string tensors."""

from __future__ import annotations

#: op type -> why we refuse it (checked before import, named in the error)
REFUSED_OPS = {
    "Gradient": "a training-only op (ai.onnx.preview.training); tvm_hetero compiles inference "
                "graphs",
}


def _narrow_type_name(elem_type: int) -> str | None:
    """The ONNX name of an 8-bit float or a sub-byte type (FLOAT8E4M3FN, INT4, ...), else
    None."""
    from onnx import TensorProto

    name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() \
        else ""
    return name if name.startswith(("FLOAT8", "FLOAT4", "INT4", "UINT4", "INT2", "UINT2")) \
        else None


def _narrow_types(model) -> str | None:
    """Why a model that converts to 8-bit floats or sub-byte types is refused, or None.
    TVM 0.27 converts to 8-bit floats without ONNX's rounding and saturation (every such onnx
    node test is wrong under plain TVM) and reads them wrongly too, but for E8M0; it cannot run
    sub-byte tensors: out of scope rather than a wrong answer."""
    why = "8-bit float and sub-byte types are out of scope (TVM 0.27 neither rounds nor "\
          "saturates 8-bit floats as ONNX specifies, nor runs sub-byte tensors)"
    for node in model.graph.node:
        for attr in node.attribute:
            name = _narrow_type_name(attr.i) if node.op_type == "Cast" and attr.name == "to" \
                else None
            if name:
                return f"op Cast (node {node.name or node.output[0]}) converts to {name}: {why}"
    for value in model.graph.output:  # CastLike's (its type comes from an input)
        name = _narrow_type_name(value.type.tensor_type.elem_type)
        if name:
            return f"output {value.name} is {name}: {why}"
    for value in [*model.graph.input, *model.graph.initializer]:
        elem_type = getattr(value, "data_type", 0) or value.type.tensor_type.elem_type
        name = _narrow_type_name(elem_type)
        if name and name != "FLOAT8E8M0":  # TVM reads E8M0 right, the others wrong
            return f"input {value.name} is {name}: {why}"
    return None


def refusal(model) -> str | None:
    """Why the model cannot be imported (an out-of-scope op or string tensors), or None.

    Parameters
    ----------
    model : onnx.ModelProto
        The model.

    Returns
    -------
    str or None
        The reason, naming the op, node, input or output; None when nothing is refused.
    """
    from onnx import TensorProto

    for node in model.graph.node:
        if node.op_type in REFUSED_OPS:
            return f"op {node.op_type} is {REFUSED_OPS[node.op_type]}"
    narrow = _narrow_types(model)
    if narrow:
        return narrow
    strings = {v.name for v in [*model.graph.input, *model.graph.output,
                                *model.graph.value_info]
               if v.type.tensor_type.elem_type == TensorProto.STRING}
    strings |= {t.name for t in model.graph.initializer if t.data_type == TensorProto.STRING}
    for node in model.graph.node:
        if strings & {*node.input, *node.output}:
            return (f"op {node.op_type} (node {node.name or node.output[0]}) works on string "
                    "tensors, which TVM does not support")
    return None
