"""The rules' ranked choices: what tuning may measure besides the heuristic's pick."""

import json

import numpy as np
import pytest
from tvm import relax

import tvm_hetero as th
from tvm_hetero.optimize import optimize_function
from tvm_hetero.optimize.choices import Choices, choose, variants
from tvm_hetero.prepare import PrepareConfig
from tvm_hetero.testing import max_relative_error

ZNVER4 = {"kind": "llvm", "mcpu": "znver4"}
AVX2 = {"kind": "llvm", "mcpu": "haswell"}


def test_choose_takes_the_first_option_unless_a_context_fixes_another():
    assert choose("tile", ["a", "b", "c"]) == "a"
    with Choices({"tile": 2, "other": 1}) as choices:
        assert choose("tile", ["a", "b", "c"]) == "c"
        assert choose("rows", [4, 2]) == 4  # not fixed: the first
        assert choose("other", [True]) is True  # past the options: the last
    assert choices.seen == {"tile": 3, "rows": 2, "other": 1}
    assert choose("tile", ["a", "b", "c"]) == "a"  # the context is left
    with pytest.raises(ValueError, match="no options"):
        choose("tile", [])


def test_variants_move_each_choice_alone_to_its_next_options():
    assert variants({"tile": 6, "pad": 2, "one": 1}) == [
        {"tile": 1}, {"tile": 2}, {"tile": 3}, {"pad": 1}]
    assert variants({"tile": 6}, limit=1) == [{"tile": 1}]


def _matvec(weights: int):
    """A kernel ``y[n] = sum_k x[k] * W[k, n]`` (W 256 x `weights` // 256), legalized."""
    from tvm_hetero.layers.extract import extract_layers
    from tvm_hetero.layers.layered import layered_module

    cols = weights // 256
    w = np.random.default_rng(0).standard_normal((256, cols)).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((256,), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.matmul(x, relax.const(w)))
        bb.emit_func_output(out)
    model = th.load_model(bb.get(), name="matvec")
    mod = layered_module(model, PrepareConfig())
    (layer,) = extract_layers(mod)
    return mod[mod.get_global_var(layer.func_name)]


def test_the_choices_of_a_rule_that_declines_the_kernel_are_not_kept():
    import tvm

    target = tvm.target.Target(ZNVER4)
    with Choices() as choices:  # split-k-gemv picks its slices, then declines small weights
        _, rule = optimize_function(_matvec(256 * 100), target)
    assert rule == "tiled"
    assert "gemv-slices" not in choices.seen and "matvec-vectors" in choices.seen


def _mixed_model():
    """A padded 3x3 convolution, MobileNet's inverted residual (1x1, depthwise 3x3 stride 2,
    1x1), a matmul of 8 rows, a matrix-vector product with 2 M weights and a small one."""
    rng = np.random.default_rng(0)

    def weights(*shape):
        return relax.const((rng.standard_normal(shape) * 0.1).astype("float32"))

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 32, 28, 28), "float32"))
    rows = relax.Var("rows", relax.TensorType((8, 256), "float32"))
    vec = relax.Var("vec", relax.TensorType((1, 2048), "float32"))
    small = relax.Var("small", relax.TensorType((256,), "float32"))
    conv = relax.op.nn.conv2d
    with bb.function("main", [x, rows, vec, small]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.relu(conv(x, weights(32, 32, 3, 3), padding=1)))
            y = bb.emit(relax.op.clip(conv(y, weights(32, 32, 1, 1)), 0, 6))
            y = bb.emit(relax.op.clip(conv(y, weights(32, 1, 3, 3), strides=2, padding=1,
                                           groups=32), 0, 6))
            y = bb.emit(conv(y, weights(32, 32, 1, 1)))
            m = bb.emit(relax.op.nn.relu(relax.op.matmul(rows, weights(256, 512))))
            v = bb.emit(relax.op.matmul(vec, weights(2048, 1004)))
            s = bb.emit(relax.op.matmul(small, weights(256, 100)))
            out = bb.emit_output(relax.Tuple([y, m, v, s]))
        bb.emit_func_output(out)
    return th.load_model(bb.get(), name="mixed")


@pytest.mark.parametrize("target", [ZNVER4, AVX2], ids=["znver4", "haswell"])
def test_every_option_of_every_choice_builds_right_code(target, prepare_for_devices):
    prepare_for_devices(blocked_min_model_flops=0)  # the blocked layout from 0 FLOPs
    model = _mixed_model()
    devices = th.DeviceSet.parse([f"d0={json.dumps(target)}"])
    inputs = model.random_inputs(seed=0)
    want = th.build(model, "all:d0", devices, optimize=False).run(inputs)
    with Choices() as default:
        compiled = th.build(model, "all:d0", devices)
    rules = set(compiled.stats.rules.values())
    assert {"blocked-nchwc", "depthwise-nchwc", "packed-matmul", "split-k-gemv",
            "tiled"} <= rules
    assert {"register-tile", "pad-per-task", "depthwise-tile", "matmul-tile", "gemv-slices",
            "matvec-vectors"} <= set(default.seen)
    for option in (1, 2, 3):  # every choice moved at once to its next options
        with Choices(dict.fromkeys(default.seen, option)):
            built = th.build(model, "all:d0", devices)
        assert built.stats.rules == compiled.stats.rules
        assert max_relative_error(built.run(inputs), want) < 1e-4, option
