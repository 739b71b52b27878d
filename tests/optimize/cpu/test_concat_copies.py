"""The ``concat-copies`` rule (``tvm_hetero/optimize/cpu/concat_copies.py``) on a concatenation of
two tensors along the channels: its schedule at two shapes, the kernel before and the schedule
expected written out in TVMScript and compared with ``tvm.ir.assert_structural_equal`` (as TVM's
dlight tests check theirs), and a kernel outside its preconditions that it declines; then a
concatenation built as one parallel copy per input.

A schedule that changes on purpose: the test's failure prints the new one; read it against the
rule's docstring and paste it over the expected function (``ruff format``).
"""

import re

from tvm.script import tirx as T

from tvm_hetero.optimize.cpu.concat_copies import ConcatCopies

from tests.helpers.schedules import add_multiply, check, declines


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


def test_schedule_8_24_of_32x32():
    # the channel axis partitioned at 8 (one copy per input), the 32 x 32 pixels fused into
    # one contiguous copy, the 2 images parallel
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((2, 8, 32, 32), "float32"),
        w: T.Buffer((2, 24, 32, 32), "float32"),
        T_concat: T.Buffer((2, 32, 32, 32), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["concatenate"]})
        # with T.sblock("root"):
        for ax0, ax1, ax2, ax3 in T.grid(2, 32, 32, 32):
            with T.sblock("T_concat"):
                v_ax0, v_ax1, v_ax2, v_ax3 = T.axis.remap("SSSS", [ax0, ax1, ax2, ax3])
                T.reads(w[v_ax0, v_ax1 - 8, v_ax2, v_ax3], x[v_ax0, v_ax1, v_ax2, v_ax3])
                T.writes(T_concat[v_ax0, v_ax1, v_ax2, v_ax3])
                T_concat[v_ax0, v_ax1, v_ax2, v_ax3] = T.if_then_else(
                    8 <= v_ax1, w[v_ax0, v_ax1 - 8, v_ax2, v_ax3], x[v_ax0, v_ax1, v_ax2, v_ax3]
                )

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((2, 8, 32, 32), "float32"),
        w: T.Buffer((2, 24, 32, 32), "float32"),
        T_concat: T.Buffer((2, 32, 32, 32), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["concatenate"]})
        # with T.sblock("root"):
        for ax0 in T.parallel(2):
            with T.sblock("T_concat_ax1_common"):
                T.reads()
                T.writes()
                with T.sblock("T_concat_ax10_partition"):
                    T.reads()
                    T.writes()
                    for ax10, ax2_ax3_fused in T.grid(8, 1024):
                        with T.sblock("T_concat_ax10"):
                            v0, v1 = T.axis.remap("SS", [ax0, ax10])
                            v2 = T.axis.spatial(32, ax2_ax3_fused // 32)
                            v3 = T.axis.spatial(32, ax2_ax3_fused % 32)
                            T.reads(w[v0, v1 + -8, v2, v3], x[0:2, 0:8, 0:32, 0:32])
                            T.writes(T_concat[0:2, 0:8, 0:32, 0:32])
                            T_concat[v0, v1, v2, v3] = T.if_then_else(
                                8 <= v1, w[v0, v1 - 8, v2, v3], x[v0, v1, v2, v3]
                            )
                with T.sblock("T_concat_ax11_partition"):
                    T.reads()
                    T.writes()
                    for ax11 in range(8, 32):
                        for ax2_ax3_fused in range(1024):
                            with T.sblock("T_concat_ax11"):
                                v0, v1 = T.axis.remap("SS", [ax0, ax11])
                                v2 = T.axis.spatial(32, ax2_ax3_fused // 32)
                                v3 = T.axis.spatial(32, ax2_ax3_fused % 32)
                                T.reads(w[v0, v1 + -8, v2, v3], x[0:2, 8:32, 0:32, 0:32])
                                T.writes(T_concat[0:2, 8:32, 0:32, 0:32])
                                T_concat[v0, v1, v2, v3] = T.if_then_else(
                                    8 <= v1, w[v0, v1 - 8, v2, v3], x[v0, v1, v2, v3]
                                )

    check(ConcatCopies(), before, expected)


def test_schedule_16_48_of_14x14():
    # partitioned at 16; each channel's 196 pixels one contiguous copy, the 4 images
    # parallel
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((4, 16, 14, 14), "float32"),
        w: T.Buffer((4, 48, 14, 14), "float32"),
        T_concat: T.Buffer((4, 64, 14, 14), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["concatenate"]})
        # with T.sblock("root"):
        for ax0, ax1, ax2, ax3 in T.grid(4, 64, 14, 14):
            with T.sblock("T_concat"):
                v_ax0, v_ax1, v_ax2, v_ax3 = T.axis.remap("SSSS", [ax0, ax1, ax2, ax3])
                T.reads(w[v_ax0, v_ax1 - 16, v_ax2, v_ax3], x[v_ax0, v_ax1, v_ax2, v_ax3])
                T.writes(T_concat[v_ax0, v_ax1, v_ax2, v_ax3])
                T_concat[v_ax0, v_ax1, v_ax2, v_ax3] = T.if_then_else(
                    16 <= v_ax1, w[v_ax0, v_ax1 - 16, v_ax2, v_ax3], x[v_ax0, v_ax1, v_ax2, v_ax3]
                )

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((4, 16, 14, 14), "float32"),
        w: T.Buffer((4, 48, 14, 14), "float32"),
        T_concat: T.Buffer((4, 64, 14, 14), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["concatenate"]})
        # with T.sblock("root"):
        for ax0 in T.parallel(4):
            with T.sblock("T_concat_ax1_common"):
                T.reads()
                T.writes()
                with T.sblock("T_concat_ax10_partition"):
                    T.reads()
                    T.writes()
                    for ax10, ax2_ax3_fused in T.grid(16, 196):
                        with T.sblock("T_concat_ax10"):
                            v0, v1 = T.axis.remap("SS", [ax0, ax10])
                            v2 = T.axis.spatial(14, ax2_ax3_fused // 14)
                            v3 = T.axis.spatial(14, ax2_ax3_fused % 14)
                            T.reads(w[v0, v1 + -16, v2, v3], x[0:4, 0:16, 0:14, 0:14])
                            T.writes(T_concat[0:4, 0:16, 0:14, 0:14])
                            T_concat[v0, v1, v2, v3] = T.if_then_else(
                                16 <= v1, w[v0, v1 - 16, v2, v3], x[v0, v1, v2, v3]
                            )
                with T.sblock("T_concat_ax11_partition"):
                    T.reads()
                    T.writes()
                    for ax11 in range(16, 64):
                        for ax2_ax3_fused in range(196):
                            with T.sblock("T_concat_ax11"):
                                v0, v1 = T.axis.remap("SS", [ax0, ax11])
                                v2 = T.axis.spatial(14, ax2_ax3_fused // 14)
                                v3 = T.axis.spatial(14, ax2_ax3_fused % 14)
                                T.reads(w[v0, v1 + -16, v2, v3], x[0:4, 16:64, 0:14, 0:14])
                                T.writes(T_concat[0:4, 16:64, 0:14, 0:14])
                                T_concat[v0, v1, v2, v3] = T.if_then_else(
                                    16 <= v1, w[v0, v1 - 16, v2, v3], x[v0, v1, v2, v3]
                                )

    check(ConcatCopies(), before, expected)


def test_declines_no_concatenation():
    # an elementwise kernel: no concatenation
    assert declines(ConcatCopies(), add_multiply())


def test_a_concatenation_is_one_parallel_copy_per_input(cpu_devices):
    import numpy as np
    import tvm

    from tvm_hetero.optimize.cpu import ConcatCopies

    @T.prim_func(private=True, s_tir=True)
    def concat(a: T.Buffer((1, 64, 55, 55), "float32"), b: T.Buffer((1, 32, 55, 55), "float32"),
               c: T.Buffer((1, 16, 55, 55), "float32"), y: T.Buffer((1, 112, 55, 55), "float32")):
        T.func_attr({"tvm_hetero.op_kinds": ["concatenate"]})
        for n, ch, h, w in T.grid(1, 112, 55, 55):
            with T.sblock("concat"):
                vn, vc, vh, vw = T.axis.remap("SSSS", [n, ch, h, w])
                y[vn, vc, vh, vw] = T.if_then_else(
                    96 <= vc, c[vn, vc - 96, vh, vw],
                    T.if_then_else(64 <= vc, b[vn, vc - 64, vh, vw], a[vn, vc, vh, vw]))

    target = cpu_devices["cpu"].tvm_target()
    scheduled = ConcatCopies().apply(concat, target)
    script = scheduled.script()
    # one parallel loop per input (channels 0-64, 64-96, 96-112), each over whole planes
    assert re.findall(r"in T.parallel\(([^)]*)\):\n\s+for \w+ in range\((\d+)\)", script) \
        == [("64", "3025"), ("64, 96", "3025"), ("96, 112", "3025")], script
    lib = tvm.tirx.build(tvm.IRModule({"main": scheduled.with_attr("global_symbol", "main")}),
                         target=target)
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal((1, ch, 55, 55)).astype("float32") for ch in (64, 32, 16)]
    out = tvm.runtime.tensor(np.zeros((1, 112, 55, 55), "float32"))
    lib["main"](*[tvm.runtime.tensor(p) for p in parts], out)
    np.testing.assert_array_equal(out.numpy(), np.concatenate(parts, axis=1))
    assert ConcatCopies().apply(_elementwise_add(), target) is None  # not a concatenation


def _elementwise_add():
    @T.prim_func(private=True, s_tir=True)
    def add(a: T.Buffer((64, 64), "float32"), b: T.Buffer((64, 64), "float32"),
            y: T.Buffer((64, 64), "float32")):
        T.func_attr({"tvm_hetero.op_kinds": ["add"]})
        for i, j in T.grid(64, 64):
            with T.sblock("add"):
                vi, vj = T.axis.remap("SS", [i, j])
                y[vi, vj] = a[vi, vj] + b[vi, vj]

    return add
