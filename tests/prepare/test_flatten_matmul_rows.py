"""FlattenMatmulRows: products of batched activations by 2-D weights become 2-D products, their
elementwise epilogue with them; before/expected modules inline, then the patterns of torch's
exports built whole against onnxruntime."""

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

import tvm_hetero as th
from tvm_hetero.build.compile import BuildStats
from tvm_hetero.prepare.flatten_matmul_rows import FlattenMatmulRows
from tvm_hetero.testing import max_relative_error, onnx_reference


def test_attention_projection_over_a_sequence_first_activation_is_one_product():
    # torch's multi-head attention projects [sequence, batch, embedding]: 197 rows of 1
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((197, 1, 768), "float32"), w: R.Tensor((768, 2304), "float32"),
                 b: R.Tensor((2304,), "float32")):
            with R.dataflow():
                y = R.matmul(x, w)
                z = R.add(b, y)
                R.output(z)
            return z

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((197, 1, 768), "float32"), w: R.Tensor((768, 2304), "float32"),
                 b: R.Tensor((2304,), "float32")):
            with R.dataflow():
                rows = R.reshape(x, R.shape([197, 768]))
                y = R.matmul(rows, w)
                z2 = R.add(b, y)
                z = R.reshape(z2, R.shape([197, 1, 2304]))
                R.output(z)
            return z

    before_text = Before.script()
    tvm.ir.assert_structural_equal(FlattenMatmulRows()(Before), Expected)
    assert Before.script() == before_text  # the input module is not modified


def test_mlp_over_a_feature_map_carries_its_epilogue_and_residual_in_2d():
    # ConvNeXt's pointwise MLP over [1, H, W, C]: GELU's arithmetic and a residual of the
    # product's shape stay in the product's kernel; the permute ends the chain
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 2, 3, 4), "float32"), w: R.Tensor((4, 5), "float32"),
                 res: R.Tensor((1, 2, 3, 5), "float32")):
            with R.dataflow():
                y = R.matmul(x, w)
                half = R.multiply(y, R.const(0.5, "float32"))
                e = R.erf(y)
                g = R.add(half, e)
                r = R.add(g, res)
                t = R.permute_dims(r, [0, 3, 1, 2])
                R.output(t)
            return t

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 2, 3, 4), "float32"), w: R.Tensor((4, 5), "float32"),
                 res: R.Tensor((1, 2, 3, 5), "float32")):
            with R.dataflow():
                rows = R.reshape(x, R.shape([6, 4]))
                y = R.matmul(rows, w)
                half = R.multiply(y, R.const(0.5, "float32"))
                e = R.erf(y)
                g = R.add(half, e)
                res2 = R.reshape(res, R.shape([6, 5]))
                r2 = R.add(g, res2)
                r = R.reshape(r2, R.shape([1, 2, 3, 5]))
                t = R.permute_dims(r, [0, 3, 1, 2])
                R.output(t)
            return t

    tvm.ir.assert_structural_equal(FlattenMatmulRows()(Before), Expected)


def test_a_scale_broadcast_along_some_batch_dimensions_ends_the_chain():
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((2, 3, 4), "float32"), w: R.Tensor((4, 5), "float32"),
                 s: R.Tensor((2, 1, 5), "float32")):
            with R.dataflow():
                y = R.matmul(x, w)
                z = R.multiply(y, s)
                R.output(z)
            return z

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((2, 3, 4), "float32"), w: R.Tensor((4, 5), "float32"),
                 s: R.Tensor((2, 1, 5), "float32")):
            with R.dataflow():
                rows = R.reshape(x, R.shape([6, 4]))
                y2 = R.matmul(rows, w)
                y = R.reshape(y2, R.shape([2, 3, 5]))
                z = R.multiply(y, s)
                R.output(z)
            return z

    tvm.ir.assert_structural_equal(FlattenMatmulRows()(Before), Expected)


@pytest.mark.parametrize("x_shape, w_shape", [
    ((1, 197, 768), (768, 64)),  # batch dimensions all 1: a 2-D product already
    ((12, 197, 64), (12, 64, 197)),  # a batch of weights: attention's heads
    ((197, 768), (768, 64)),
])
def test_products_that_are_no_batch_by_a_2d_weight_are_left_alone(x_shape, w_shape):
    builder = relax.BlockBuilder()  # TVMScript cannot read the parameters' shapes
    x = relax.Var("x", relax.TensorType(x_shape, "float32"))
    w = relax.Var("w", relax.TensorType(w_shape, "float32"))
    with builder.function("main", [x, w]):
        with builder.dataflow():
            y = builder.emit_output(relax.op.matmul(x, w))
        builder.emit_func_output(y)
    module = builder.get()
    tvm.ir.assert_structural_equal(FlattenMatmulRows()(module), module)


# ----------------------------------------------------------------------------------------------
# whole: the exporters' patterns built, scheduled by the matmul rule and right


def _init(rng, name, *shape):
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.05).astype(np.float32), name)


def _attention_projection():
    """torchvision's ViT attention input projection as the TorchScript exporter writes it."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
             helper.make_node("MatMul", ["xt", "w"], ["y"]),
             helper.make_node("Add", ["b", "y"], ["out"])]
    graph = helper.make_graph(
        nodes, "projection", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 50, 96])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [50, 1, 288])],
        [_init(rng, "w", 96, 288), _init(rng, "b", 288)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feature_map_mlp():
    """ConvNeXt's block tail: NCHW -> NHWC, MLP with erf GELU, layer scale, back, residual."""
    rng = np.random.default_rng(1)
    gelu = [helper.make_node("Div", ["h", "sqrt2"], ["hd"]),
            helper.make_node("Erf", ["hd"], ["he"]),
            helper.make_node("Add", ["he", "one"], ["h1"]),
            helper.make_node("Mul", ["h", "h1"], ["hm"]),
            helper.make_node("Mul", ["hm", "half"], ["hg"])]
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 3, 1]),
             helper.make_node("MatMul", ["xt", "w1"], ["h0"]),
             helper.make_node("Add", ["h0", "b1"], ["h"]), *gelu,
             helper.make_node("MatMul", ["hg", "w2"], ["o0"]),
             helper.make_node("Add", ["o0", "b2"], ["o1"]),
             helper.make_node("Mul", ["o1", "scale"], ["o2"]),
             helper.make_node("Transpose", ["o2"], ["o3"], perm=[0, 3, 1, 2]),
             helper.make_node("Add", ["o3", "x"], ["out"])]
    scalars = [numpy_helper.from_array(np.array(v, np.float32), n)
               for n, v in (("sqrt2", 2 ** 0.5), ("one", 1.0), ("half", 0.5))]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 7, 7])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 32, 7, 7])],
        [_init(rng, "w1", 32, 128), _init(rng, "b1", 128), _init(rng, "w2", 128, 32),
         _init(rng, "b2", 32), _init(rng, "scale", 32), *scalars])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("make", [_attention_projection, _feature_map_mlp])
def test_exported_batched_products_take_the_packed_matmul_rule_and_are_right(make):
    onnx_model = make()
    onnx.checker.check_model(onnx_model)
    model = th.load_model(onnx_model)
    stats = BuildStats()
    compiled = th.build(model, "all:cpu", ["cpu"], stats=stats)
    matmuls = {k: rule for k, rule in stats.rules.items() if "matmul" in k}
    assert matmuls and set(matmuls.values()) == {"packed-matmul"}, matmuls
    inputs = model.random_inputs()
    want = onnx_reference(onnx_model, inputs, model)
    assert max_relative_error(compiled.run(inputs), want) < 1e-5
