"""Fast structural tests of the optimization rules and their table (no model builds)."""

import logging

import pytest
from tvm.script import tirx as T

import tvm_hetero as th
from tvm_hetero import optimize
from tvm_hetero.layers.classify import LAYER_KINDS
from tvm_hetero.optimize import table
from tvm_hetero.optimize.cpu.packed_weights import tiled_fits_better


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
    conv2d = optimize.default_table().rules_for("cpu", "conv2d")
    packed = next(r for r in conv2d if r.name == "packed-weights")
    assert packed.prefer_other is tiled_fits_better
    names = [r.name for r in conv2d]
    assert names.index("packed-weights") < names.index("tiled")


def test_a_new_rule_class_is_used_once_named_in_the_table():
    class EveryAdd(optimize.Rule):
        name = "every-add"
        description = "marks elementwise kernels"
        kinds = ("elementwise",)
        families = ("cpu",)

        def apply(self, func, target):
            return func.with_attr("tvm_hetero.marked", 1)

    rules = table.default_table().with_rule("cpu", "elementwise", EveryAdd())  # the one line
    assert rules.rules_for("cpu", "elementwise")[0].name == "every-add"
    func, rule = optimize.optimize_function(_add(), _llvm(), rules=rules)
    assert rule == "every-add" and int(func.attrs["tvm_hetero.marked"]) == 1
    # passed: what is given no table gets the default rules, without it
    assert optimize.optimize_function(_add(), _llvm())[1] != "every-add"
    assert table.resolve_table(None).is_default


def test_a_table_is_a_value_and_its_variants_are_new_tables():
    from tvm_hetero.optimize.cpu import Tiled

    defaults = optimize.default_table()
    assert defaults == optimize.default_table() and defaults.is_default
    assert defaults.key == optimize.default_table().key and defaults.fast_exp
    without = defaults.without("tiled")
    assert all("tiled" not in names for _, _, names in without.rows())
    assert "tiled" in [r.name for r in defaults.rules_for("cpu", "conv2d")]  # untouched
    assert without != defaults and not without.is_default
    # a class, in one pair only
    only_matmul = defaults.without(Tiled, "cpu", "matmul")
    assert "tiled" not in [r.name for r in only_matmul.rules_for("cpu", "matmul")]
    assert "tiled" in [r.name for r in only_matmul.rules_for("cpu", "conv2d")]
    # a rule at a position, last, or a whole entry replaced
    mine = optimize.Rule.from_callable("mine", "mine", lambda f, t: None,
                                       kinds=("pooling",), families=("cpu",))
    assert [r.name for r in defaults.with_rule("cpu", "pooling", mine, 1)["cpu", "pooling"]] \
        == ["pooling-rows", "mine", "reduction-chains", "symbolic-loops", "parallel-loops"]
    assert defaults.with_rule("cpu", "pooling", mine, None).rules_for("cpu", "pooling")[-1] \
        is mine
    assert defaults.with_rules("cpu", "pooling", [mine])["cpu", "pooling"] == (mine,)
    assert not defaults.with_fast_exp(False).fast_exp
    assert defaults.with_fast_exp(False) != defaults
    assert defaults.with_fast_exp(False).with_fast_exp(True) == defaults
    # a setting of a rule tells two tables apart (Tiled(rows=4) is not Tiled())
    assert defaults.with_rule("cpu", "conv2d", Tiled(rows=4)) != \
        defaults.with_rule("cpu", "conv2d", Tiled())
    with pytest.raises(ValueError, match="serves kinds"):
        defaults.with_rule("cpu", "conv2d", mine)
    with pytest.raises(ValueError, match="unknown"):
        defaults.with_rules("tpu", "conv2d", [])
    with pytest.raises(TypeError, match="RuleTable"):
        optimize.optimize_function(_add(), _llvm(), rules={("cpu", "elementwise"): []})


def _exp():
    @T.prim_func(private=True, s_tir=True)
    def exp(a: T.Buffer((512, 512), "float32"), y: T.Buffer((512, 512), "float32")):
        T.func_attr({"tvm_hetero.op_kinds": ["exp"]})
        for i, j in T.grid(512, 512):
            with T.sblock("exp"):
                vi, vj = T.axis.remap("SS", [i, j])
                y[vi, vj] = T.exp(a[vi, vj])

    return exp


def test_the_vector_exp_is_an_option_of_the_table():
    fast, rule = optimize.optimize_function(_exp(), _llvm(), "exp")
    assert rule is not None and "T.exp(" not in fast.script()
    plain, rule_without = optimize.optimize_function(
        _exp(), _llvm(), "exp", rules=optimize.default_table().with_fast_exp(False))
    assert rule_without == rule and "T.exp(" in plain.script()


def test_a_rule_is_added_only_where_it_serves():
    rule = optimize.Rule.from_callable("pools", "pools only", lambda f, t: None,
                                       kinds=("pooling",), families=("cpu",))
    defaults = optimize.default_table()
    assert defaults.with_rule("cpu", "pooling", rule).rules_for("cpu", "pooling")[0] is rule
    with pytest.raises(ValueError, match="serves kinds"):
        defaults.with_rule("cpu", "conv2d", rule)
    with pytest.raises(ValueError, match="serves kinds"):
        defaults.with_rule("cuda", "pooling", rule)


def _raising(func, target):
    raise RuntimeError("index out of range in my schedule")


def _with_broken_rule():
    """The default table with a rule that raises tried first for CPU elementwise kernels."""
    return optimize.default_table().with_rule(
        "cpu", "elementwise", optimize.Rule.from_callable("broken", "raises", _raising))


def test_a_raising_rule_is_one_warning_in_use_then_the_next_rule(monkeypatch, caplog):
    monkeypatch.delenv(optimize.STRICT_RULES_ENV, raising=False)
    with caplog.at_level(logging.DEBUG, logger="tvm_hetero.optimize"):
        _, rule = optimize.optimize_function(_add(), _llvm(), "fused_add", _with_broken_rule())
    assert rule == "injective-lanes"  # the next rule that fits
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "broken" in warnings[0].message and "fused_add" in warnings[0].message
    assert "index out of range" in warnings[0].message


def test_a_raising_rule_fails_in_strict_mode(monkeypatch):
    monkeypatch.setenv(optimize.STRICT_RULES_ENV, "1")
    with pytest.raises(th.BuildError, match="rule broken raised on kernel fused_add: .*index"):
        optimize.optimize_function(_add(), _llvm(), "fused_add", _with_broken_rule())


def test_the_tests_run_in_strict_mode():
    assert optimize.strict_rules()


@pytest.mark.parametrize("mcpu, expected", [("x86-64", (4, 16)), ("haswell", (8, 16)),
                                            ("skylake-avx512", (16, 32)), ("znver4", (16, 32))])
def test_vector_lanes_follow_the_targets_mcpu(mcpu, expected):
    import tvm

    from tvm_hetero.target import vector_lanes

    assert vector_lanes(tvm.target.Target({"kind": "llvm", "mcpu": mcpu})) == expected


def test_a_kernel_written_already_scheduled_is_left_as_written():
    # the frontend's index checks carry tir.is_scheduled; a rule would fail on their buffers
    func = _add().with_attr("tir.is_scheduled", True)
    scheduled, rule = optimize.optimize_function(func, _llvm(), "guard", _with_broken_rule())
    assert rule == "as-written"
    assert scheduled.same_as(func)
