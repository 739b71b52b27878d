"""The op table (its order and weights fix every seed's graph) and the public functions:
:func:`random_graph`, :func:`random_inputs`, :func:`op_types`."""

from __future__ import annotations

from typing import Callable

import numpy as np

from .builder import IR_VERSION, OPSET, Builder, first_input
from .conv import (op_batch_norm, op_conv, op_conv_fanout, op_conv_transpose, op_depth_space,
                   op_pool, op_residual, op_resize, op_squeeze_excite)
from .elementwise import op_binary, op_mask, op_unary, op_where
from .matmul import op_gemm, op_matmul, op_matmul_left
from .movement import (op_concat, op_expand, op_gather, op_pad, op_reshape, op_slice,
                       op_split, op_squeeze, op_tile, op_transpose)
from .norms import op_instance_norm, op_layer_norm, op_reduce, op_rms_norm, op_softmax


_OPS: dict[str, tuple[float, Callable[[Builder], bool]]] = {
    "unary": (6, op_unary), "binary": (7, op_binary), "conv": (6, op_conv),
    "conv_transpose": (1, op_conv_transpose), "batch_norm": (1, op_batch_norm),
    "pool": (3, op_pool), "resize": (1.5, op_resize), "concat": (2, op_concat),
    "split": (1.5, op_split), "slice": (2, op_slice), "pad": (1.5, op_pad),
    "reshape": (2, op_reshape), "transpose": (1.5, op_transpose),
    "squeeze": (1.5, op_squeeze), "reduce": (5, op_reduce), "softmax": (2, op_softmax),
    "layer_norm": (1.5, op_layer_norm), "instance_norm": (0.5, op_instance_norm),
    "matmul": (4, op_matmul), "matmul_left": (1, op_matmul_left), "gemm": (3, op_gemm),
    "gather": (1.5, op_gather),
    "expand": (1.5, op_expand), "tile": (0.7, op_tile), "where": (1.5, op_where),
    "mask": (0.7, op_mask), "depth_space": (0.5, op_depth_space),
    "squeeze_excite": (0.7, op_squeeze_excite), "residual": (0.7, op_residual),
    "rms_norm": (0.7, op_rms_norm), "conv_fanout": (1, op_conv_fanout),
}


def random_graph(seed: int, *, min_nodes: int = 4, max_nodes: int = 20):
    """A random valid ONNX graph (opset 17, float32).

    Parameters
    ----------
    seed : int
        The same seed gives the same graph (byte for byte).
    min_nodes, max_nodes : int
        The graph has between `min_nodes` and `max_nodes` nodes (inclusive).

    Returns
    -------
    onnx.ModelProto
        Weights are initializers, inputs graph inputs of fixed shapes; every value no node
        reads is a graph output (often several), sometimes an intermediate value too.
    """
    from onnx import helper

    if not 1 <= min_nodes <= max_nodes:
        raise ValueError(f"need 1 <= min_nodes <= max_nodes, got {min_nodes}, {max_nodes}")
    rng = np.random.default_rng(seed)
    b = Builder(rng)
    target = b.randint(min_nodes, max_nodes)
    first_input(b)
    names = list(_OPS)
    weights = np.array([_OPS[n][0] for n in names], dtype=float)
    tries = 0
    while len(b.nodes) < target and tries < 400:
        tries += 1
        snap = b.snapshot()
        op = _OPS[names[int(rng.choice(len(names), p=weights / weights.sum()))]][1]
        if not op(b) or len(b.nodes) > max_nodes:
            b.restore(snap)
    if len(b.nodes) < min_nodes:  # pad with cheap unary ops (never in practice)
        while len(b.nodes) < min_nodes:
            op_unary(b, "Relu")
    produced = {out for node in b.nodes for out in node.output}
    outputs = [v for v in b.values if b.uses[v.name] == 0 and v.name in produced]
    inner = [v for v in b.values if b.uses[v.name] > 0 and v.name in produced]
    if inner and rng.random() < 0.3:  # an intermediate value as an output too
        outputs.append(inner[int(rng.integers(len(inner)))])
    used = {name for node in b.nodes for name in node.input}
    inputs = [i for i in b.inputs if i.name in used]
    graph = helper.make_graph(
        b.nodes, f"fuzz_{seed}", inputs,
        [helper.make_tensor_value_info(v.name, 1, list(v.shape)) for v in outputs],
        initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="tvm_hetero.graph_gen")
    model.ir_version = IR_VERSION
    return model


def random_inputs(model, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input of `model` (not its initializers): standard normal
    floats, random booleans, small integers.

    Parameters
    ----------
    model : onnx.ModelProto
    seed : int

    Returns
    -------
    dict of str to numpy.ndarray
        By graph input name.
    """
    from onnx import helper

    rng = np.random.default_rng(seed)
    init_names = {init.name for init in model.graph.initializer}
    out = {}
    for value in model.graph.input:
        if value.name in init_names:
            continue
        ttype = value.type.tensor_type
        shape = [d.dim_value for d in ttype.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(ttype.elem_type)
        if dtype == np.bool_:
            data = rng.random(shape) < 0.5
        elif np.issubdtype(dtype, np.integer):
            data = rng.integers(0, 4, shape)
        else:
            data = rng.standard_normal(shape)
        out[value.name] = np.asarray(data).astype(dtype)
    return out


def op_types(model) -> list[str]:
    """The op types of `model`'s nodes, in order."""
    return [node.op_type for node in model.graph.node]


__all__ = ["OPSET", "op_types", "random_graph", "random_inputs"]
