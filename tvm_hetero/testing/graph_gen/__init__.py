"""Seeded random valid ONNX graphs, for differential testing against onnxruntime and TVM.

:func:`random_graph` builds a graph of 4-20 nodes (opset 17, float32, weights as
initializers, graph inputs of fixed shapes) from the op vocabulary the importer accepts:
convolutions of every kind (grouped, depthwise, dilated, strided, 1-D, transposed) with fused
activations, pools, ``Resize``, ``Concat`` / ``Split`` / ``Slice`` / ``Pad``, reshapes and
transposes, elementwise ops with broadcasting, reductions over any axes, softmax, layer and
batch normalization, ``MatMul`` / ``Gemm``, ``Gather``, ``Where``, ``Expand`` and more, with
fan-out, residual joins and several graph outputs. Shapes favour edge cases: extents of 1,
odd and prime extents, extents that are no multiple of 8 or 16, inner dimensions of 1.

Every graph is valid by construction: ``onnx.checker.check_model(m, full_check=True)``,
``onnx.shape_inference.infer_shapes(m, strict_mode=True)`` and onnxruntime accept it (the
declared output shapes are those onnx infers). Values stay numerically tame, so that a
relative tolerance of about 1e-4 separates a wrong answer from rounding: ``Log`` / ``Sqrt`` /
``Pow`` / ``Reciprocal`` / ``Div`` see inputs bounded away from 0, ``Exp`` small ones,
discontinuous ops (``Floor``, comparisons) only values that every implementation computes
bit for bit (graph inputs and data movement of them), and normalizations never a slice that
a broadcast made constant.

The package: :mod:`.builder` (the graph under construction, its values, shape helpers and
bounds), the ops by family (:mod:`.elementwise`, :mod:`.conv`, :mod:`.movement`,
:mod:`.norms`, :mod:`.matmul`; each ``op_*(builder)`` adds one op or pattern, or returns False
when it does not fit) and :mod:`.generate` (the op table and the public functions).
"""

from .generate import OPSET, op_types, random_graph, random_inputs

__all__ = ["OPSET", "op_types", "random_graph", "random_inputs"]
