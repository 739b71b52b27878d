"""FoldConstantLayouts (``tvm_hetero/prepare/fold_constant_layouts.py``): blocked constants computed
by the layout transform's index map."""

import numpy as np
import tvm
from tvm import relax

from tvm_hetero.prepare.fold_constant_layouts import FoldConstantLayouts

from tests.helpers.relax_modules import random_weights, relax_module


def test_fold_constant_layouts_computes_blocked_constants_by_the_index_map():
    weight = random_weights(32, 16, 3, 3)

    def before(bb):
        return relax.op.layout_transform(
            relax.const(weight),
            index_map=lambda o, i, h, w: (o // 16, i // 8, h, w, i % 8, o % 16))

    expected = np.empty((2, 2, 3, 3, 8, 16), "float32")
    for o, i, h, w in np.ndindex(*weight.shape):
        expected[o // 16, i // 8, h, w, i % 8, o % 16] = weight[o, i, h, w]
    after = FoldConstantLayouts()(relax_module([], before))
    tvm.ir.assert_structural_equal(after, relax_module([], lambda bb: relax.const(expected)))
