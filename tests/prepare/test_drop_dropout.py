"""DropDropout (``tvm_hetero/prepare/drop_dropout.py``) on a small module against the module it
should give (``tvm.ir.assert_structural_equal``)."""

import tvm
from tvm.script import ir as I
from tvm.script import relax as R

import tvm_hetero as th
from tvm_hetero.prepare.drop_dropout import DropDropout

from tests.helpers.models import light
from tests.helpers.relax_modules import conv_then_dropout


def test_drop_dropout_reads_the_input_where_dropout_s_first_output_was_read():
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 4), "float32")):
            with R.dataflow():
                d = R.nn.dropout(x, 0.5)
                y = d[0]
                z = R.nn.relu(y)
                R.output(z)
            return z

    @I.ir_module
    class Expected:  # the dead dropout is DeadCodeElimination's
        @R.function
        def main(x: R.Tensor((1, 4), "float32")):
            with R.dataflow():
                _d = R.nn.dropout(x, 0.5)
                y = x
                z = R.nn.relu(y)
                R.output(z)
            return z

    tvm.ir.assert_structural_equal(DropDropout()(Before), Expected)


def test_inference_dropout_is_dropped_and_the_convolution_blocked():
    mod = conv_then_dropout()
    layers = th.extract_layers(mod)
    assert [l.op_kinds for l in layers] == [["conv2d"]]  # blocked: two form kernels beside
    assert len(layers[0].outputs[0].shape) == 5
    squeezenet = th.extract_layers(light("squeezenet"))
    assert not any("dropout" in op for l in squeezenet for op in l.op_kinds)
    # all its convolutions run blocked (the RGB one reads its 3 channels as one block, the
    # 1000-class one is padded to 1008)
    assert all(len(l.outputs[0].shape) == 5 for l in squeezenet if l.kind == "conv2d")
    assert sum(l.kind == "conv2d" for l in squeezenet) == 26
