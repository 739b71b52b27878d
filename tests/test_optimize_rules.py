"""Fast structural tests of the optimization rules and their table (no model builds)."""

import logging

import pytest
from tvm.script import tirx as T

import tvm_hetero as th
from tvm_hetero import optimize
from tvm_hetero.layers import LAYER_KINDS
from tvm_hetero.optimize import table
from tvm_hetero.optimize.cpu.packed_weights import tiled_fits_better


@pytest.fixture(autouse=True)
def fresh_table():
    optimize.reset_table()
    yield
    optimize.reset_table()


def _add(rows: int = 512):
    @T.prim_func(private=True, s_tir=True)
    def add(a: T.Buffer((rows, 512), "float32"), b: T.Buffer((rows, 512), "float32"),
            y: T.Buffer((rows, 512), "float32")):
        T.func_attr({"tvm_hetero.op_kinds": ["add"]})
        for i, j in T.grid(rows, 512):
            with T.sblock("add"):
                vi, vj = T.axis.remap("SS", [i, j])
                y[vi, vj] = a[vi, vj] + b[vi, vj]

    return add


def _llvm():
    import tvm

    return tvm.target.Target({"kind": "llvm", "mcpu": "x86-64"})


def test_every_rule_of_the_table_declares_what_it_serves():
    for (family, kind), rules in optimize.default_table().items():
        assert rules, (family, kind)
        for rule in rules:
            assert isinstance(rule, optimize.Rule)
            assert rule.name and rule.description
            assert set(rule.kinds) <= set(LAYER_KINDS) and set(rule.families) <= set(
                optimize.FAMILIES)
            assert rule.serves(family, kind), (rule.name, family, kind)


def test_the_catch_all_rules_come_last():
    for (family, kind), rules in optimize.default_table().items():
        names = [rule.name for rule in rules]
        if family != "cpu":
            assert names[-1] == "dlight.gpu.Fallback"  # a GPU kernel must be scheduled
        elif kind != "reduction":  # (dlight's CPU reduction rule after it: what it declines)
            assert names[-1] == "parallel-loops"


def test_packed_weights_yields_to_tiled_in_the_table_itself():
    packed = next(r for r in optimize.rules_for("cpu", "conv2d") if r.name == "packed-weights")
    assert packed.prefer_other is tiled_fits_better
    names = [r.name for r in optimize.rules_for("cpu", "conv2d")]
    assert names.index("packed-weights") < names.index("tiled")


def test_a_new_rule_class_is_used_once_named_in_the_table(monkeypatch):
    class EveryAdd(optimize.Rule):
        name = "every-add"
        description = "marks elementwise kernels"
        kinds = ("elementwise",)
        families = ("cpu",)

        def apply(self, func, target):
            return func.with_attr("tvm_hetero.marked", 1)

    defaults = table.default_table

    def with_the_new_rule():
        rules = defaults()
        rules[("cpu", "elementwise")].insert(0, EveryAdd())  # the one added line
        return rules

    monkeypatch.setattr(table, "default_table", with_the_new_rule)
    optimize.reset_table()
    assert optimize.rules_for("cpu", "elementwise")[0].name == "every-add"
    func, rule = optimize.optimize_function(_add(), _llvm())
    assert rule == "every-add" and int(func.attrs["tvm_hetero.marked"]) == 1


def test_a_rule_is_registered_only_where_it_serves():
    rule = optimize.Rule.from_callable("pools", "pools only", lambda f, t: None,
                                       kinds=("pooling",), families=("cpu",))
    optimize.register_rule("cpu", "pooling", rule)
    with pytest.raises(ValueError, match="serves kinds"):
        optimize.register_rule("cpu", "conv2d", rule)
    with pytest.raises(ValueError, match="serves kinds"):
        optimize.register_rule("cuda", "pooling", rule)


def _raising(func, target):
    raise RuntimeError("index out of range in my schedule")


def test_a_raising_rule_is_one_warning_in_use_then_the_next_rule(monkeypatch, caplog):
    monkeypatch.delenv(optimize.STRICT_RULES_ENV, raising=False)
    optimize.register_rule("cpu", "elementwise",
                           optimize.Rule.from_callable("broken", "raises", _raising))
    with caplog.at_level(logging.DEBUG, logger="tvm_hetero.optimize"):
        _, rule = optimize.optimize_function(_add(), _llvm(), "fused_add")
    assert rule == "injective-lanes"  # the next rule that fits
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "broken" in warnings[0].message and "fused_add" in warnings[0].message
    assert "index out of range" in warnings[0].message


def test_a_raising_rule_fails_in_strict_mode(monkeypatch):
    monkeypatch.setenv(optimize.STRICT_RULES_ENV, "1")
    optimize.register_rule("cpu", "elementwise",
                           optimize.Rule.from_callable("broken", "raises", _raising))
    with pytest.raises(th.BuildError, match="rule broken raised on kernel fused_add: .*index"):
        optimize.optimize_function(_add(), _llvm(), "fused_add")


def test_the_tests_run_in_strict_mode():
    assert optimize.strict_rules()


@pytest.mark.parametrize("mcpu, expected", [("x86-64", (4, 16)), ("haswell", (8, 16)),
                                            ("skylake-avx512", (16, 32)), ("znver4", (16, 32))])
def test_vector_lanes_follow_the_targets_mcpu(mcpu, expected):
    import tvm

    from tvm_hetero.optimize.cpu.base import vector_lanes

    assert vector_lanes(tvm.target.Target({"kind": "llvm", "mcpu": mcpu})) == expected


def test_a_kernel_written_already_scheduled_is_left_as_written():
    # the frontend's index checks carry tir.is_scheduled; a rule would fail on their buffers
    func = _add().with_attr("tir.is_scheduled", True)
    optimize.register_rule("cpu", "elementwise",
                           optimize.Rule.from_callable("broken", "raises", _raising))
    scheduled, rule = optimize.optimize_function(func, _llvm(), "guard")
    assert rule == "as-written"
    assert scheduled.same_as(func)
