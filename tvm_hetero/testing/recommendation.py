"""A DLRM-like recommendation model in ONNX: large embedding tables beside small dense layers,
the case where a placement across a CPU and a GPU has a reason a user recognises (the tables
beyond the GPU's memory cap stay in host memory, the dense layers run on the GPU).

:func:`recommendation_model` builds it with the suite's :class:`~.suite.graph.GraphBuilder`
(opset 17, seeded weights, nothing downloaded): per table an ``int64`` input of ``bag`` ids per
sample, a ``Gather`` over the table and a ``ReduceSum`` over the bag (sum pooling); a bottom
MLP over 13 dense features (Criteo's count) down to the embedding width; DLRM's dot-product
interaction (the pairwise dot products of the bottom MLP's output and the pooled embeddings,
concatenated with the bottom output); a top MLP down to one logit and a ``Sigmoid``.

The defaults (8 tables of 100,000 x 64 float32 rows: 24.4 MiB each, 195 MiB in all; dense
layers 1024 wide, 5 MiB; batch 2048) are the real case scaled down a thousandfold so that they
build in seconds: the tables together (and each of them) are larger than a 32 MiB cap on the
GPU, the dense layers with their activations (about 21 MiB) are not, and at batch 2048 the
dense layers are most of the model's FLOPs (about 5 GFLOP). :data:`SMALL` is the size for
tests and for carrying a built library to another machine (0.5 MiB of tables).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from .suite.graph import GraphBuilder, float_input, normal_array

DENSE_FEATURES = 13  # Criteo's integer features, DLRM's dense input

# the size for tests and for carrying built libraries: tables 4 x 2000 x 16 (0.5 MiB)
SMALL = {"tables": 4, "rows": 2000, "dim": 16, "dense": 64, "batch": 32, "bag": 2}


def recommendation_model(tables: int = 8, rows: int = 100_000, dim: int = 64,
                         dense: int = 1024, batch: int = 2048, bag: int = 4, seed: int = 0
                         ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A DLRM-like model and seeded inputs for it.

    Parameters
    ----------
    tables : int
        Embedding tables, one sparse feature each (default 8).
    rows : int
        Rows of every table (default 100,000).
    dim : int
        Embedding width, also the bottom MLP's output width (default 64).
    dense : int
        Width of the hidden layers of both MLPs (default 1024).
    batch : int
        Samples per inference (default 2048).
    bag : int
        Ids per sample and table, summed (default 4; 1 is one id per table).
    seed : int
        Seed of the weights and of the inputs (default 0).

    Returns
    -------
    tuple of (onnx.ModelProto, dict of str to numpy.ndarray)
        The model (opset 17; inputs ``dense_features`` [batch, 13] float32 and ``ids_0`` ..
        ``ids_{tables-1}`` [batch, bag] int64; output [batch, 1] float32, a click
        probability) and its inputs by name (ids uniform over the table's rows).
    """
    for name, value in (("tables", tables), ("rows", rows), ("dim", dim), ("dense", dense),
                        ("batch", batch), ("bag", bag)):
        if value < 1:
            raise ValueError(f"recommendation_model: {name} must be >= 1, got {value}")
    g = GraphBuilder(seed)
    # sparse features: one embedding bag per table
    pooled = []
    for t in range(tables):
        table = g.const(g.rng.standard_normal((rows, dim), dtype=np.float32) * 0.05,
                        f"table_{t}")
        rows_of_bag = g.op("Gather", [table, f"ids_{t}"], axis=0)  # [batch, bag, dim]
        pooled.append(g.op("ReduceSum", [rows_of_bag, g.ints([1])], keepdims=0))
    # bottom MLP: dense features -> dense -> dim
    bottom = g.op("Relu", [g.gemm("dense_features", DENSE_FEATURES, dense)])
    bottom = g.op("Relu", [g.gemm(bottom, dense, dim)])
    # interaction: the pairwise dot products of [bottom, pooled...], with bottom beside them
    features = [g.op("Unsqueeze", [f, g.ints([1])]) for f in [bottom, *pooled]]
    stacked = g.op("Concat", features, axis=1)  # [batch, tables + 1, dim]
    dots = g.op("MatMul", [stacked, g.op("Transpose", [stacked], perm=[0, 2, 1])])
    interaction = g.op("Concat", [bottom, g.op("Flatten", [dots], axis=1)], axis=1)
    # top MLP: -> dense -> dense -> 1, a probability
    width = dim + (tables + 1) ** 2
    top = g.op("Relu", [g.gemm(interaction, width, dense)])
    top = g.op("Relu", [g.gemm(top, dense, dense)])
    out = g.op("Sigmoid", [g.gemm(top, dense, 1)])

    inputs = [float_input("dense_features", [batch, DENSE_FEATURES])]
    inputs += [helper.make_tensor_value_info(f"ids_{t}", TensorProto.INT64, [batch, bag])
               for t in range(tables)]
    model = g.model(f"dlrm_t{tables}_r{rows}_d{dim}", inputs, [out])
    rng = np.random.default_rng(seed + 1)
    feed = {"dense_features": normal_array([batch, DENSE_FEATURES], seed + 1)}
    feed.update({f"ids_{t}": rng.integers(0, rows, (batch, bag), dtype=np.int64)
                 for t in range(tables)})
    return model, feed


__all__ = ["DENSE_FEATURES", "SMALL", "recommendation_model"]
