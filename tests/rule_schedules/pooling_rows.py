"""Expected: the ``pooling-rows`` rule's schedule of the kernel of ``test_pooling_rows``
(``tests/test_rule_schedules.py``)."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def main(x: T.Buffer((1, 8, 64, 64), "float32"), pool_max: T.Buffer((1, 8, 32, 32), "float32")):
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
