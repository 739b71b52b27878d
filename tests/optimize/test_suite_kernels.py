"""Kernel classes of the architecture suite (tvm_hetero.testing.suite): each scheduled by a
rule (none left to TVM's default loops) and computing what TVM's default loops compute."""

import pytest
import tvm
from tvm.script import tirx as T

from tvm_hetero.optimize.pass_ import optimize_function
from tests.helpers.kernels import llvm_target, scheduled_and_checked
from tvm_hetero.testing import suite


def _attention_scores(heads: int, tokens: int, dh: int):
    """ViT's ``q @ k / sqrt(dh)`` with a prime token count (197 in ViT-B/16)."""

    @T.prim_func(private=True, s_tir=True)
    def scores(q: T.Buffer((1, heads, tokens, dh), "float32"),
               k: T.Buffer((1, heads, dh, tokens), "float32"),
               out: T.Buffer((1, heads, tokens, tokens), "float32")):
        T.func_attr({"tvm_hetero.op_kinds": ["matmul", "divide"]})
        acc = T.sblock_alloc_buffer((1, heads, tokens, tokens))
        for b, h, i, j, r in T.grid(1, heads, tokens, tokens, dh):
            with T.sblock("matmul"):
                vb, vh, vi, vj, vr = T.axis.remap("SSSSR", [b, h, i, j, r])
                with T.init():
                    acc[vb, vh, vi, vj] = T.float32(0)
                acc[vb, vh, vi, vj] = acc[vb, vh, vi, vj] + q[vb, vh, vi, vr] * k[vb, vh, vr, vj]
        for b, h, i, j in T.grid(1, heads, tokens, tokens):
            with T.sblock("divide"):
                vb, vh, vi, vj = T.axis.remap("SSSS", [b, h, i, j])
                out[vb, vh, vi, vj] = acc[vb, vh, vi, vj] / T.float32(8)

    return scores


def test_a_matmul_epilogue_over_a_prime_extent_is_right():
    # ViT's wrong answer: tiles of one row x one lane (197 is prime, 17 too) left the epilogue
    # no loop of its own, and the tiled rule vectorized the loop around the whole reduction
    # instead (TVM then kept one accumulator for all lanes)
    assert scheduled_and_checked(_attention_scores(2, 17, 8)) == "tiled"


def _census(proto, name, target, check_rules=()):
    """``{kernel: rule}`` of a model's layered module under the table; the kernels scheduled
    by `check_rules` are also run against TVM's default loops."""
    import tvm_hetero as th
    from tvm_hetero.layers.layered import layered_module

    mod = layered_module(th.load_model(proto, name=name))
    rules = {}
    for gv, func in mod.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            _, rule = optimize_function(func.with_attr("target", target), target, gv.name_hint)
            if rule in check_rules:
                scheduled_and_checked(func, target)
            rules[gv.name_hint] = rule
    return rules


def _smallsuite_models():
    """Small instances of the suite's generators, with the kernel classes of the full ones:
    embedding gather and int64 index fix-up, attention mask, softmax, layer norm, GELU,
    transposes, ViT's class-token gather and prime token count, squeeze-and-excite 1x1
    convolutions of 1x1 maps with HardSwish, SiLU and sigmoid gates, depthwise 3x3 and 5x5."""
    return {"bert_layer": suite.bert_layer(seq=16, d=64, heads=2, vocab=64)[0],
            "gpt2_block": suite.gpt2_block(seq=16, d=64, heads=2)[0],
            "vit": suite.vit(d=64, heads=2, patch=16)[0],
            "mobilenet_v3_block": suite.mobilenet_v3_block()[0],
            "efficientnet_block": suite.efficientnet_block()[0]}


@pytest.mark.parametrize("mcpu", ["znver4", "haswell"])
def test_no_kernel_of_the_small_suite_keeps_tvms_default_loops(mcpu):
    target = llvm_target(mcpu)
    used = {}
    for name, proto in _smallsuite_models().items():
        rules = _census(proto, name, target,
                        check_rules=("injective-lanes", "row-reductions") if mcpu == "znver4"
                        else ())
        assert [k for k, rule in rules.items() if rule is None] == [], name
        used[name] = rules
    # the classes that had no rule: gathers, softmax and layer norm, 1x1 maps
    assert used["bert_layer"]["take"] == used["vit"]["take"] == "injective-lanes"
    assert used["vit"]["softmax"] == used["vit"]["layer_norm"] == "row-reductions"
    assert "row-reductions" in used["efficientnet_block"].values()


@pytest.mark.slow
def test_no_kernel_of_the_suite_keeps_tvms_default_loops():
    target = llvm_target()
    unscheduled = {}
    for name, make in suite.SUITE.items():
        if name in ("lstm", "gru"):  # not imported by TVM 0.27's ONNX frontend
            continue
        rules = _census(make()[0], name, target)
        unscheduled.update({f"{name}:{k}": None for k, rule in rules.items() if rule is None})
    assert unscheduled == {}
