"""FuseTIRKeepingOpKinds (``tvm_hetero/prepare/op_kinds.py``): each fused kernel names the ops it
fuses."""

import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_hetero.prepare.op_kinds import FuseTIRKeepingOpKinds
from tvm_hetero.relax_ir import OP_KINDS_ATTR


def test_fuse_tir_keeping_op_kinds_names_the_ops_of_each_fused_kernel():
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((1, 4), "float32"), y: R.Tensor((1, 4), "float32")):
            with R.dataflow():
                s = R.add(x, y)
                z = R.nn.relu(s)
                R.output(z)
            return z

    with tvm.target.Target({"kind": "llvm"}):
        fused = tvm.transform.Sequential([
            relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
            relax.transform.FuseOps()])(Before)
        after = FuseTIRKeepingOpKinds()(fused)
        expected = relax.transform.FuseTIR()(fused)
    (gv,) = [gv for gv, f in expected.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    expected[gv] = expected[gv].with_attr(OP_KINDS_ATTR, ["add", "relu"])
    tvm.ir.assert_structural_equal(after, expected)
