"""Expected: the ``reduction-chains`` rule's schedule of the kernel of ``test_reduction_chains``
(``tests/test_rule_schedules.py``)."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def main(x: T.Buffer((1, 16, 5, 5), "float32"), T_divide: T.Buffer((1, 16, 1, 1), "float32")):
    T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["mean"]})
    # with T.sblock("root"):
    x_red = T.sblock_alloc_buffer((1, 16, 1, 1))
    x_red_local = T.sblock_alloc_buffer((1, 16, 1, 1), scope="local")
    for ax0_ax1_ax2_ax3_fused_0 in T.parallel(2):
        for ax0_ax1_ax2_ax3_fused_1_init in T.unroll(8):
            with T.sblock("x_red_init"):
                v_ax0 = T.axis.spatial(1, 0)
                v_ax1 = T.axis.spatial(
                    16, ax0_ax1_ax2_ax3_fused_0 * 8 + ax0_ax1_ax2_ax3_fused_1_init
                )
                v_ax2 = T.axis.spatial(1, 0)
                v_ax3 = T.axis.spatial(1, 0)
                T.reads()
                T.writes(x_red_local[v_ax0, v_ax1, v_ax2, v_ax3])
                x_red_local[v_ax0, v_ax1, v_ax2, v_ax3] = T.float32(0.0)
        for k2, k3 in T.grid(5, 5):
            for ax0_ax1_ax2_ax3_fused_1 in T.unroll(8):
                with T.sblock("x_red_update"):
                    v_ax0 = T.axis.spatial(1, 0)
                    v_ax1 = T.axis.spatial(
                        16, ax0_ax1_ax2_ax3_fused_0 * 8 + ax0_ax1_ax2_ax3_fused_1
                    )
                    v_ax2 = T.axis.spatial(1, 0)
                    v_ax3 = T.axis.spatial(1, 0)
                    v_k2, v_k3 = T.axis.remap("RR", [k2, k3])
                    T.reads(x_red_local[v_ax0, v_ax1, v_ax2, v_ax3], x[v_ax0, v_ax1, v_k2, v_k3])
                    T.writes(x_red_local[v_ax0, v_ax1, v_ax2, v_ax3])
                    x_red_local[v_ax0, v_ax1, v_ax2, v_ax3] = (
                        x_red_local[v_ax0, v_ax1, v_ax2, v_ax3] + x[v_ax0, v_ax1, v_k2, v_k3]
                    )
        for ax0 in range(8):
            with T.sblock("x_red_local"):
                v0 = T.axis.spatial(1, 0)
                v1 = T.axis.spatial(16, ax0_ax1_ax2_ax3_fused_0 * 8 + ax0)
                v2 = T.axis.spatial(1, 0)
                v3 = T.axis.spatial(1, 0)
                T.reads(x_red_local[v0, v1, v2, v3])
                T.writes(x_red[v0, v1, v2, v3])
                x_red[v0, v1, v2, v3] = x_red_local[v0, v1, v2, v3]
        for ax0 in range(8):
            with T.sblock("T_divide"):
                v_ax0 = T.axis.spatial(1, 0)
                v_ax1 = T.axis.spatial(16, ax0_ax1_ax2_ax3_fused_0 * 8 + ax0)
                v_ax2 = T.axis.spatial(1, 0)
                v_ax3 = T.axis.spatial(1, 0)
                T.reads(x_red[v_ax0, v_ax1, v_ax2, v_ax3])
                T.writes(T_divide[v_ax0, v_ax1, v_ax2, v_ax3])
                T_divide[v_ax0, v_ax1, v_ax2, v_ax3] = x_red[
                    v_ax0, v_ax1, v_ax2, v_ax3
                ] / T.float32(25.0)
