"""ConstantsAtFullRank (``tvm_hetero/prepare/constants_at_full_rank.py``) on a small module against
the module it should give."""

import tvm
from tvm import relax

from tvm_hetero.prepare.constants_at_full_rank import ConstantsAtFullRank

from tests.helpers.relax_modules import random_weights, relax_module


def test_constants_at_full_rank_reshapes_lower_rank_constants_of_binary_ops():
    scale, shift = random_weights(4, 1, 1), random_weights(8, seed=1)
    params = [("x", (1, 4, 8, 8))]
    before = relax_module(params, lambda bb, x: relax.op.add(
        bb.emit(relax.op.multiply(x, relax.const(scale))), relax.const(shift)))
    expected = relax_module(params, lambda bb, x: relax.op.add(
        bb.emit(relax.op.multiply(x, relax.const(scale.reshape(1, 4, 1, 1)))),
        relax.const(shift.reshape(1, 1, 1, 8))))
    tvm.ir.assert_structural_equal(ConstantsAtFullRank()(before), expected)
