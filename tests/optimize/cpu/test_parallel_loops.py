"""The ``parallel-loops`` rule (``tvm_hetero/optimize/cpu/parallel_loops.py``) on an elementwise
kernel: its schedule at two shapes, the kernel before and the schedule expected written out in
TVMScript and compared with ``tvm.ir.assert_structural_equal`` (as TVM's dlight tests check theirs),
and a kernel outside its preconditions that it declines; then the innermost loop of an elementwise
kernel kept apart.

A schedule that changes on purpose: the test's failure prints the new one; read it against the
rule's docstring and paste it over the expected function (``ruff format``).
"""

import re

from tvm.script import tirx as T

from tvm_hetero.optimize.cpu.parallel_loops import ParallelLoops

from tests.helpers.schedules import add_multiply, check, declines


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


def test_schedule_64x512():
    # add inlined into the multiply; the 64 rows parallel, each row's 512 columns a plain
    # inner loop (for LLVM to vectorize)
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((64, 512), "float32"),
        w: T.Buffer((64, 512), "float32"),
        T_multiply: T.Buffer((64, 512), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["add", "multiply"]})
        # with T.sblock("root"):
        T_add = T.sblock_alloc_buffer((64, 512))
        for ax0, ax1 in T.grid(64, 512):
            with T.sblock("T_add"):
                v_ax0, v_ax1 = T.axis.remap("SS", [ax0, ax1])
                T.reads(x[v_ax0, v_ax1], w[v_ax0, v_ax1])
                T.writes(T_add[v_ax0, v_ax1])
                T_add[v_ax0, v_ax1] = x[v_ax0, v_ax1] + w[v_ax0, v_ax1]
        for ax0, ax1 in T.grid(64, 512):
            with T.sblock("T_multiply"):
                v_ax0, v_ax1 = T.axis.remap("SS", [ax0, ax1])
                T.reads(T_add[v_ax0, v_ax1], x[v_ax0, v_ax1])
                T.writes(T_multiply[v_ax0, v_ax1])
                T_multiply[v_ax0, v_ax1] = T_add[v_ax0, v_ax1] * x[v_ax0, v_ax1]

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((64, 512), "float32"),
        w: T.Buffer((64, 512), "float32"),
        T_multiply: T.Buffer((64, 512), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["add", "multiply"]})
        # with T.sblock("root"):
        for ax0 in T.parallel(64):
            for ax1 in range(512):
                with T.sblock("T_multiply"):
                    v0, v1 = T.axis.remap("SS", [ax0, ax1])
                    T.reads(x[v0, v1], w[v0, v1])
                    T.writes(T_multiply[v0, v1])
                    T_multiply[v0, v1] = (x[v0, v1] + w[v0, v1]) * x[v0, v1]

    check(ParallelLoops(), before, expected)


def test_schedule_512x100():
    # the 512 rows parallel, each row's 100 columns a plain inner loop
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((512, 100), "float32"),
        w: T.Buffer((512, 100), "float32"),
        T_multiply: T.Buffer((512, 100), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["add", "multiply"]})
        # with T.sblock("root"):
        T_add = T.sblock_alloc_buffer((512, 100))
        for ax0, ax1 in T.grid(512, 100):
            with T.sblock("T_add"):
                v_ax0, v_ax1 = T.axis.remap("SS", [ax0, ax1])
                T.reads(x[v_ax0, v_ax1], w[v_ax0, v_ax1])
                T.writes(T_add[v_ax0, v_ax1])
                T_add[v_ax0, v_ax1] = x[v_ax0, v_ax1] + w[v_ax0, v_ax1]
        for ax0, ax1 in T.grid(512, 100):
            with T.sblock("T_multiply"):
                v_ax0, v_ax1 = T.axis.remap("SS", [ax0, ax1])
                T.reads(T_add[v_ax0, v_ax1], x[v_ax0, v_ax1])
                T.writes(T_multiply[v_ax0, v_ax1])
                T_multiply[v_ax0, v_ax1] = T_add[v_ax0, v_ax1] * x[v_ax0, v_ax1]

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((512, 100), "float32"),
        w: T.Buffer((512, 100), "float32"),
        T_multiply: T.Buffer((512, 100), "float32"),
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["add", "multiply"]})
        # with T.sblock("root"):
        for ax0 in T.parallel(512):
            for ax1 in range(100):
                with T.sblock("T_multiply"):
                    v0, v1 = T.axis.remap("SS", [ax0, ax1])
                    T.reads(x[v0, v1], w[v0, v1])
                    T.writes(T_multiply[v0, v1])
                    T_multiply[v0, v1] = (x[v0, v1] + w[v0, v1]) * x[v0, v1]

    check(ParallelLoops(), before, expected)


def test_declines_too_small_for_the_thread_pool():
    # 4 x 4: too small for the thread pool
    assert declines(ParallelLoops(), add_multiply(4, 4))


def test_parallel_loops_keeps_the_innermost_loop_of_an_elementwise_kernel_apart():
    import tvm

    from tvm_hetero.optimize.cpu import ParallelLoops

    @T.prim_func(private=True, s_tir=True)
    def concat(a: T.Buffer((1, 64, 55, 55), "float32"), b: T.Buffer((1, 64, 55, 55), "float32"),
               y: T.Buffer((1, 128, 55, 55), "float32")):
        for n, c, h, w in T.grid(1, 128, 55, 55):
            with T.sblock("concat"):
                vn, vc, vh, vw = T.axis.remap("SSSS", [n, c, h, w])
                y[vn, vc, vh, vw] = T.if_then_else(64 <= vc, b[vn, vc - 64, vh, vw],
                                                   a[vn, vc, vh, vw])

    script = ParallelLoops().apply(concat, tvm.target.Target({"kind": "llvm"})).script()
    # rows in parallel; each row's 55 columns one inner loop (no index division per element)
    assert re.search(r"in T.parallel\(7040\):\n\s+for \w+ in range\(55\):", script), script
