"""Conv1dAsConv2d (``tvm_hetero/prepare/conv1d_as_conv2d.py``): 1-D convolutions as 2-D ones, the
chain between them lifted; the graph phase runs it unless configured off; a temporal conv net
built with the 2-D rules, right."""

import numpy as np
import pytest
from tvm import relax

import tvm_hetero as th
from tvm_hetero.prepare import PrepareConfig
from tvm_hetero.prepare.conv1d_as_conv2d import Conv1dAsConv2d
from tvm_hetero.prepare.pipeline import graph_phase

from tests.helpers.relax_modules import (AVX2, ZNVER4, device_set, op_counts, random_weights,
                                         relax_module, run_legalized)


def _temporal_block(bb, x, residual):
    """Conv1d (groups 2, dilation 2) + bias + ReLU, a residual add of another input, a strided
    conv1d; the ReLU's output also read transposed (an op that stays 3-D)."""
    conv = bb.emit(relax.op.nn.conv1d(x, relax.const(random_weights(8, 4, 3)), padding=[2, 2],
                                      dilation=2, groups=2))
    biased = bb.emit(relax.op.add(conv, relax.const(random_weights(1, 8, 1, seed=1))))
    act = bb.emit(relax.op.nn.relu(biased))
    summed = bb.emit(relax.op.add(act, residual))
    strided = bb.emit(relax.op.nn.conv1d(summed, relax.const(random_weights(8, 8, 3, seed=2)),
                                         strides=2, padding=[1, 0]))
    return relax.Tuple([strided, relax.op.permute_dims(act)])


def test_conv1d_as_conv2d_lifts_the_chain_between_convolutions_and_keeps_the_result():
    params = [("x", (1, 8, 32)), ("r", (1, 8, 32))]
    before = relax_module(params, _temporal_block)
    after = relax.transform.DeadCodeElimination()(relax.transform.CanonicalizeBindings()(
        Conv1dAsConv2d()(before)))
    counts = op_counts(after)
    assert counts["relax.nn.conv2d"] == 2 and "relax.nn.conv1d" not in counts
    # in: x and the residual; out: the strided convolution and the ReLU the transpose reads
    assert counts["relax.expand_dims"] == 2 and counts["relax.squeeze"] == 2
    assert counts["relax.add"] == 2 and counts["relax.nn.relu"] == 1
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(shape).astype("float32") for _, shape in params]
    for got, want in zip(run_legalized(after, inputs), run_legalized(before, inputs)):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_conv1d_as_conv2d_lifts_a_clip_with_its_bounds():
    # ReLU6 after a 1-D convolution: clip's bounds are scalar arguments, not tensors
    params = [("x", (1, 8, 32))]

    def body(bb, x):
        conv = bb.emit(relax.op.nn.conv1d(x, relax.const(random_weights(8, 8, 3)), padding=[1, 1]))
        return relax.op.clip(conv, 0, 6)

    before = relax_module(params, body)
    after = relax.transform.DeadCodeElimination()(Conv1dAsConv2d()(before))
    counts = op_counts(after)
    assert counts["relax.nn.conv2d"] == 1 and counts["relax.clip"] == 1
    assert counts["relax.squeeze"] == 1  # once, after the clip
    inputs = [np.random.default_rng(0).standard_normal((1, 8, 32)).astype("float32")]
    np.testing.assert_allclose(run_legalized(after, inputs)[0],
                               run_legalized(before, inputs)[0], rtol=1e-5, atol=1e-5)


def test_the_graph_phase_runs_conv1d_as_conv2d_unless_configured_off():
    before = relax_module([("x", (1, 8, 32)), ("r", (1, 8, 32))], _temporal_block)
    assert "relax.nn.conv1d" not in op_counts(graph_phase(PrepareConfig())(before))
    off = graph_phase(PrepareConfig(conv1d_as_conv2d=False))(before)
    assert op_counts(off)["relax.nn.conv1d"] == 2


@pytest.mark.parametrize("target, lanes, blocked", [(AVX2, 8, True), (ZNVER4, 16, True),
                                                     (ZNVER4, 16, False)])
def test_a_temporal_conv_net_builds_with_the_2d_rules_and_is_right(target, lanes, blocked,
                                                                   prepare_for_devices):
    from tvm_hetero.testing import max_relative_error

    if blocked:  # the blocked layout from 0 FLOPs
        prepare_for_devices(blocked_min_model_flops=0)

    def tcn(bb, x):
        y = bb.emit(relax.op.nn.conv1d(x, relax.const(random_weights(16, 16, 3)), padding=[2, 2],
                                       dilation=2))
        y = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(y, relax.const(
            random_weights(1, 16, 1, seed=1))))))
        return relax.op.add(x, y)

    mod = relax_module([("x", (1, 16, 64))], tcn)
    model = th.load_model(mod, name="tcn")
    devices = device_set(target)
    layers = th.extract_layers(model, PrepareConfig.for_devices(devices))
    (conv,) = [layer for layer in layers if layer.kind == "conv2d"]
    compiled = th.build(model, "all:d0", devices)
    if blocked:
        assert conv.outputs[0].shape == (1, 16 // lanes, 1, 64, lanes)
        assert compiled.stats.rules[conv.func_name] == "blocked-nchwc"
    else:  # NCHW of height 1 (a small model stays unblocked), scheduled
        assert conv.outputs[0].shape == (1, 16, 1, 64)
        assert compiled.stats.rules[conv.func_name] is not None
    inputs = model.random_inputs(seed=0)
    want = run_legalized(mod, [inputs[spec.name] for spec in model.inputs])
    assert max_relative_error(compiled.run(inputs), want) < 1e-5
