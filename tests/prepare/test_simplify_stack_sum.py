"""SimplifyStackSum (``tvm_hetero/prepare/simplify_stack_sum.py``) on a small module against the
module it should give (``tvm.ir.assert_structural_equal``)."""

import tvm
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_hetero.prepare.simplify_stack_sum import SimplifyStackSum


def test_simplify_stack_sum_adds_and_drops_broadcasts_to_the_same_shape():
    @I.ir_module
    class Before:
        @R.function
        def main(a: R.Tensor((1, 4), "float32"), b: R.Tensor((1, 4), "float32")):
            with R.dataflow():
                ba = R.broadcast_to(a, R.shape([1, 4]))
                bb = R.broadcast_to(b, R.shape([1, 4]))
                s = R.stack((ba, bb), axis=0)
                out = R.sum(s, axis=[0])
                R.output(out)
            return out

    @I.ir_module
    class Expected:
        @R.function
        def main(a: R.Tensor((1, 4), "float32"), b: R.Tensor((1, 4), "float32")):
            with R.dataflow():
                ba = a
                bb = b
                _s = R.stack((ba, bb), axis=0)
                lv = R.add(ba, bb)
                out = lv
                R.output(out)
            return out

    tvm.ir.assert_structural_equal(SimplifyStackSum()(Before), Expected)
