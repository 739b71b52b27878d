"""The ``pooling-rows`` rule (``tvm_hetero/optimize/cpu/pooling_rows.py``) on a 2 x 2 max pool: its
schedule at two shapes, the kernel before and the schedule expected written out in TVMScript and
compared with ``tvm.ir.assert_structural_equal`` (as TVM's dlight tests check theirs), and a kernel
outside its preconditions that it declines.

A schedule that changes on purpose: the test's failure prints the new one; read it against the
rule's docstring and paste it over the expected function (``ruff format``).
"""

from tvm.script import tirx as T

from tvm_hetero.optimize.cpu.pooling_rows import PoolingRows

from tests.helpers.schedules import check, declines, max_pool


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


def test_schedule_8x64x64():
    # a parallel task per output row (8 channels x 32 rows), initialized, then updated per
    # window offset, its 32 columns as 2 vectors of 16
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((1, 8, 64, 64), "float32"), pool_max: T.Buffer((1, 8, 32, 32), "float32")
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["max_pool2d"]})
        # with T.sblock("root"):
        for ax0, ax1, ax2, ax3, rv0, rv1 in T.grid(1, 8, 32, 32, 2, 2):
            with T.sblock("pool_max"):
                v_ax0, v_ax1, v_ax2, v_ax3, v_rv0, v_rv1 = T.axis.remap(
                    "SSSSRR", [ax0, ax1, ax2, ax3, rv0, rv1]
                )
                T.reads(x[v_ax0, v_ax1, v_ax2 * 2 + v_rv0, v_ax3 * 2 + v_rv1])
                T.writes(pool_max[v_ax0, v_ax1, v_ax2, v_ax3])
                T.sblock_attr({"schedule_rule": "meta_schedule.pool_max"})
                with T.init():
                    pool_max[v_ax0, v_ax1, v_ax2, v_ax3] = T.float32(
                        -340282346638528859811704183484516925440.0
                    )
                pool_max[v_ax0, v_ax1, v_ax2, v_ax3] = T.max(
                    pool_max[v_ax0, v_ax1, v_ax2, v_ax3],
                    x[v_ax0, v_ax1, v_ax2 * 2 + v_rv0, v_ax3 * 2 + v_rv1],
                )

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((1, 8, 64, 64), "float32"), pool_max: T.Buffer((1, 8, 32, 32), "float32")
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["max_pool2d"]})
        # with T.sblock("root"):
        for ax0_ax1_ax2_fused in T.parallel(256):
            for ax3_0 in range(2):
                for ax3_1_init in T.vectorized(16):
                    with T.sblock("pool_max_init"):
                        v_ax0 = T.axis.spatial(1, 0)
                        v_ax1 = T.axis.spatial(8, ax0_ax1_ax2_fused // 32)
                        v_ax2 = T.axis.spatial(32, ax0_ax1_ax2_fused % 32)
                        v_ax3 = T.axis.spatial(32, ax3_0 * 16 + ax3_1_init)
                        T.reads()
                        T.writes(pool_max[v_ax0, v_ax1, v_ax2, v_ax3])
                        T.sblock_attr({"schedule_rule": "meta_schedule.pool_max"})
                        pool_max[v_ax0, v_ax1, v_ax2, v_ax3] = T.float32(
                            -340282346638528859811704183484516925440.0
                        )
                for rv0, rv1 in T.grid(2, 2):
                    for ax3_1 in T.vectorized(16):
                        with T.sblock("pool_max_update"):
                            v_ax0 = T.axis.spatial(1, 0)
                            v_ax1 = T.axis.spatial(8, ax0_ax1_ax2_fused // 32)
                            v_ax2 = T.axis.spatial(32, ax0_ax1_ax2_fused % 32)
                            v_ax3 = T.axis.spatial(32, ax3_0 * 16 + ax3_1)
                            v_rv0, v_rv1 = T.axis.remap("RR", [rv0, rv1])
                            T.reads(
                                pool_max[v_ax0, v_ax1, v_ax2, v_ax3],
                                x[v_ax0, v_ax1, v_ax2 * 2 + v_rv0, v_ax3 * 2 + v_rv1],
                            )
                            T.writes(pool_max[v_ax0, v_ax1, v_ax2, v_ax3])
                            T.sblock_attr({"schedule_rule": "meta_schedule.pool_max"})
                            pool_max[v_ax0, v_ax1, v_ax2, v_ax3] = T.max(
                                pool_max[v_ax0, v_ax1, v_ax2, v_ax3],
                                x[v_ax0, v_ax1, v_ax2 * 2 + v_rv0, v_ax3 * 2 + v_rv1],
                            )

    check(PoolingRows(), before, expected)


def test_schedule_16x40x40():
    # 16 channels x 20 rows, under MIN_PARALLEL_WORK: one loop on one core; each row's 20
    # columns as 2 vectors of 10
    @T.prim_func(s_tir=True, private=True)
    def before(
        x: T.Buffer((1, 16, 40, 40), "float32"), pool_max: T.Buffer((1, 16, 20, 20), "float32")
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["max_pool2d"]})
        # with T.sblock("root"):
        for ax0, ax1, ax2, ax3, rv0, rv1 in T.grid(1, 16, 20, 20, 2, 2):
            with T.sblock("pool_max"):
                v_ax0, v_ax1, v_ax2, v_ax3, v_rv0, v_rv1 = T.axis.remap(
                    "SSSSRR", [ax0, ax1, ax2, ax3, rv0, rv1]
                )
                T.reads(x[v_ax0, v_ax1, v_ax2 * 2 + v_rv0, v_ax3 * 2 + v_rv1])
                T.writes(pool_max[v_ax0, v_ax1, v_ax2, v_ax3])
                T.sblock_attr({"schedule_rule": "meta_schedule.pool_max"})
                with T.init():
                    pool_max[v_ax0, v_ax1, v_ax2, v_ax3] = T.float32(
                        -340282346638528859811704183484516925440.0
                    )
                pool_max[v_ax0, v_ax1, v_ax2, v_ax3] = T.max(
                    pool_max[v_ax0, v_ax1, v_ax2, v_ax3],
                    x[v_ax0, v_ax1, v_ax2 * 2 + v_rv0, v_ax3 * 2 + v_rv1],
                )

    @T.prim_func(s_tir=True, private=True)
    def expected(
        x: T.Buffer((1, 16, 40, 40), "float32"), pool_max: T.Buffer((1, 16, 20, 20), "float32")
    ):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["max_pool2d"]})
        # with T.sblock("root"):
        for ax0_ax1_ax2_fused, ax3_0 in T.grid(320, 2):
            for ax3_1_init in T.vectorized(10):
                with T.sblock("pool_max_init"):
                    v_ax0 = T.axis.spatial(1, 0)
                    v_ax1 = T.axis.spatial(16, ax0_ax1_ax2_fused // 20)
                    v_ax2 = T.axis.spatial(20, ax0_ax1_ax2_fused % 20)
                    v_ax3 = T.axis.spatial(20, ax3_0 * 10 + ax3_1_init)
                    T.reads()
                    T.writes(pool_max[v_ax0, v_ax1, v_ax2, v_ax3])
                    T.sblock_attr({"schedule_rule": "meta_schedule.pool_max"})
                    pool_max[v_ax0, v_ax1, v_ax2, v_ax3] = T.float32(
                        -340282346638528859811704183484516925440.0
                    )
            for rv0, rv1 in T.grid(2, 2):
                for ax3_1 in T.vectorized(10):
                    with T.sblock("pool_max_update"):
                        v_ax0 = T.axis.spatial(1, 0)
                        v_ax1 = T.axis.spatial(16, ax0_ax1_ax2_fused // 20)
                        v_ax2 = T.axis.spatial(20, ax0_ax1_ax2_fused % 20)
                        v_ax3 = T.axis.spatial(20, ax3_0 * 10 + ax3_1)
                        v_rv0, v_rv1 = T.axis.remap("RR", [rv0, rv1])
                        T.reads(
                            pool_max[v_ax0, v_ax1, v_ax2, v_ax3],
                            x[v_ax0, v_ax1, v_ax2 * 2 + v_rv0, v_ax3 * 2 + v_rv1],
                        )
                        T.writes(pool_max[v_ax0, v_ax1, v_ax2, v_ax3])
                        T.sblock_attr({"schedule_rule": "meta_schedule.pool_max"})
                        pool_max[v_ax0, v_ax1, v_ax2, v_ax3] = T.max(
                            pool_max[v_ax0, v_ax1, v_ax2, v_ax3],
                            x[v_ax0, v_ax1, v_ax2 * 2 + v_rv0, v_ax3 * 2 + v_rv1],
                        )

    check(PoolingRows(), before, expected)


def test_declines_a_width_without_lanes():
    # 17 columns: no divisor of 4 to 16 lanes
    assert declines(PoolingRows(), max_pool(1, 34))
