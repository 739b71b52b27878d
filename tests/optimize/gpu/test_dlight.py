"""dlight's rules as table rules (``tvm_hetero/optimize/gpu/dlight.py``): the schedules of
dlight's CPU ``Reduction`` (the CPU reduction table's last rule) and GPU ``Fallback`` at two
shapes each, the kernel before and the schedule expected written out in TVMScript and compared
with ``tvm.ir.assert_structural_equal``, and dlight's ``Matmul`` declining a kernel without one.

A schedule that changes on purpose (a TVM upgrade): the test's failure prints the new one; paste
it over the expected function (``ruff format``).
"""

from tvm.script import tirx as T

from tvm_hetero.optimize.gpu import DlightRule

from tests.helpers.schedules import CUDA, check, declines, exponential


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


def test_cpu_reduction_schedule_8x4():
    # dlight's rule (the reduction table's last): rows parallel, the sum computed per row,
    # the subtraction vectorized (rows of 4: under any host's vector width, which the rule
    # reads from the host's LLVM, not the target)
    @T.prim_func(s_tir=True, private=True)
    def before(x: T.Buffer((8, 4), "float32"), T_subtract: T.Buffer((8, 4), "float32")):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["sum", "subtract"]})
        # with T.sblock("root"):
        x_red = T.sblock_alloc_buffer((8, 1))
        for ax0, ax1, k1 in T.grid(8, 1, 4):
            with T.sblock("x_red"):
                v_ax0, v_ax1, v_k1 = T.axis.remap("SSR", [ax0, ax1, k1])
                T.reads(x[v_ax0, v_k1])
                T.writes(x_red[v_ax0, v_ax1])
                with T.init():
                    x_red[v_ax0, v_ax1] = T.float32(0.0)
                x_red[v_ax0, v_ax1] = x_red[v_ax0, v_ax1] + x[v_ax0, v_k1]
        for ax0, ax1 in T.grid(8, 4):
            with T.sblock("T_subtract"):
                v_ax0, v_ax1 = T.axis.remap("SS", [ax0, ax1])
                T.reads(x[v_ax0, v_ax1], x_red[v_ax0, 0])
                T.writes(T_subtract[v_ax0, v_ax1])
                T_subtract[v_ax0, v_ax1] = x[v_ax0, v_ax1] - x_red[v_ax0, 0]

    @T.prim_func(s_tir=True, private=True)
    def expected(x: T.Buffer((8, 4), "float32"), T_subtract: T.Buffer((8, 4), "float32")):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["sum", "subtract"]})
        # with T.sblock("root"):
        x_red = T.sblock_alloc_buffer((8, 1))
        for ax0 in T.parallel(8):
            for ax0_1, ax1 in T.grid(1, 4):
                with T.sblock("x_red"):
                    v0 = T.axis.spatial(8, ax0 + ax0_1)
                    v1 = T.axis.reduce(4, ax1)
                    T.reads(x[v0, v1])
                    T.writes(x_red[v0, 0])
                    with T.init():
                        x_red[v0, 0] = T.float32(0.0)
                    x_red[v0, 0] = x_red[v0, 0] + x[v0, v1]
            for ax1 in T.vectorized(4):
                with T.sblock("T_subtract"):
                    v0, v1 = T.axis.remap("SS", [ax0, ax1])
                    T.reads(x[v0, v1], x_red[v0, 0])
                    T.writes(T_subtract[v0, v1])
                    T_subtract[v0, v1] = x[v0, v1] - x_red[v0, 0]

    check(DlightRule("cpu", "Reduction"), before, expected)


def test_cpu_reduction_schedule_32x4():
    # 32 rows parallel, the sum per row, the subtraction vectorized over the row's 4
    @T.prim_func(s_tir=True, private=True)
    def before(x: T.Buffer((32, 4), "float32"), T_subtract: T.Buffer((32, 4), "float32")):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["sum", "subtract"]})
        # with T.sblock("root"):
        x_red = T.sblock_alloc_buffer((32, 1))
        for ax0, ax1, k1 in T.grid(32, 1, 4):
            with T.sblock("x_red"):
                v_ax0, v_ax1, v_k1 = T.axis.remap("SSR", [ax0, ax1, k1])
                T.reads(x[v_ax0, v_k1])
                T.writes(x_red[v_ax0, v_ax1])
                with T.init():
                    x_red[v_ax0, v_ax1] = T.float32(0.0)
                x_red[v_ax0, v_ax1] = x_red[v_ax0, v_ax1] + x[v_ax0, v_k1]
        for ax0, ax1 in T.grid(32, 4):
            with T.sblock("T_subtract"):
                v_ax0, v_ax1 = T.axis.remap("SS", [ax0, ax1])
                T.reads(x[v_ax0, v_ax1], x_red[v_ax0, 0])
                T.writes(T_subtract[v_ax0, v_ax1])
                T_subtract[v_ax0, v_ax1] = x[v_ax0, v_ax1] - x_red[v_ax0, 0]

    @T.prim_func(s_tir=True, private=True)
    def expected(x: T.Buffer((32, 4), "float32"), T_subtract: T.Buffer((32, 4), "float32")):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["sum", "subtract"]})
        # with T.sblock("root"):
        x_red = T.sblock_alloc_buffer((32, 1))
        for ax0 in T.parallel(32):
            for ax0_1, ax1 in T.grid(1, 4):
                with T.sblock("x_red"):
                    v0 = T.axis.spatial(32, ax0 + ax0_1)
                    v1 = T.axis.reduce(4, ax1)
                    T.reads(x[v0, v1])
                    T.writes(x_red[v0, 0])
                    with T.init():
                        x_red[v0, 0] = T.float32(0.0)
                    x_red[v0, 0] = x_red[v0, 0] + x[v0, v1]
            for ax1 in T.vectorized(4):
                with T.sblock("T_subtract"):
                    v0, v1 = T.axis.remap("SS", [ax0, ax1])
                    T.reads(x[v0, v1], x_red[v0, 0])
                    T.writes(T_subtract[v0, v1])
                    T_subtract[v0, v1] = x[v0, v1] - x_red[v0, 0]

    check(DlightRule("cpu", "Reduction"), before, expected)


def test_gpu_fallback_schedule_4x64():
    # the 256 elements fused and bound to one block of 1024 threads, guarded by T.where
    @T.prim_func(s_tir=True, private=True)
    def before(x: T.Buffer((4, 64), "float32"), compute: T.Buffer((4, 64), "float32")):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["exp"]})
        # with T.sblock("root"):
        for i0, i1 in T.grid(4, 64):
            with T.sblock("compute"):
                v_i0, v_i1 = T.axis.remap("SS", [i0, i1])
                T.reads(x[v_i0, v_i1])
                T.writes(compute[v_i0, v_i1])
                compute[v_i0, v_i1] = T.exp(x[v_i0, v_i1])

    @T.prim_func(s_tir=True, private=True)
    def expected(x: T.Buffer((4, 64), "float32"), compute: T.Buffer((4, 64), "float32")):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["exp"]})
        # with T.sblock("root"):
        for ax0_ax1_fused_0 in T.thread_binding(1, thread="blockIdx.x"):
            for ax0_ax1_fused_1 in T.thread_binding(1024, thread="threadIdx.x"):
                with T.sblock("compute"):
                    v0 = T.axis.spatial(4, (ax0_ax1_fused_0 * 1024 + ax0_ax1_fused_1) // 64)
                    v1 = T.axis.spatial(64, (ax0_ax1_fused_0 * 1024 + ax0_ax1_fused_1) % 64)
                    T.where(ax0_ax1_fused_0 * 1024 + ax0_ax1_fused_1 < 256)
                    T.reads(x[v0, v1])
                    T.writes(compute[v0, v1])
                    compute[v0, v1] = T.exp(x[v0, v1])

    check(DlightRule("gpu", "Fallback"), before, expected, CUDA)


def test_gpu_fallback_schedule_3x1000():
    # the 3000 elements fused, 3 blocks of 1024 threads, guarded by T.where
    @T.prim_func(s_tir=True, private=True)
    def before(x: T.Buffer((3, 1000), "float32"), compute: T.Buffer((3, 1000), "float32")):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["exp"]})
        # with T.sblock("root"):
        for i0, i1 in T.grid(3, 1000):
            with T.sblock("compute"):
                v_i0, v_i1 = T.axis.remap("SS", [i0, i1])
                T.reads(x[v_i0, v_i1])
                T.writes(compute[v_i0, v_i1])
                compute[v_i0, v_i1] = T.exp(x[v_i0, v_i1])

    @T.prim_func(s_tir=True, private=True)
    def expected(x: T.Buffer((3, 1000), "float32"), compute: T.Buffer((3, 1000), "float32")):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["exp"]})
        # with T.sblock("root"):
        for ax0_ax1_fused_0 in T.thread_binding(3, thread="blockIdx.x"):
            for ax0_ax1_fused_1 in T.thread_binding(1024, thread="threadIdx.x"):
                with T.sblock("compute"):
                    v0 = T.axis.spatial(3, (ax0_ax1_fused_0 * 1024 + ax0_ax1_fused_1) // 1000)
                    v1 = T.axis.spatial(1000, (ax0_ax1_fused_0 * 1024 + ax0_ax1_fused_1) % 1000)
                    T.where(ax0_ax1_fused_0 * 1024 + ax0_ax1_fused_1 < 3000)
                    T.reads(x[v0, v1])
                    T.writes(compute[v0, v1])
                    compute[v0, v1] = T.exp(x[v0, v1])

    check(DlightRule("gpu", "Fallback"), before, expected, CUDA)


def test_matmul_declines_a_kernel_without_a_matmul():
    # dlight's Matmul: an elementwise kernel, no matmul
    assert declines(DlightRule("gpu", "Matmul"), exponential())
