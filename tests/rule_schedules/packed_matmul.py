"""Expected: the ``packed-matmul`` rule's schedule of the kernel of ``test_packed_matmul``
(``tests/test_rule_schedules.py``)."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def main(
    x: T.Buffer((16, 8), "float32"),
    w: T.Buffer((2, 8, 16), "float32"),
    z: T.Buffer((32,), "float32"),
    T_add: T.Buffer((16, 32), "float32"),
):
    T.func_attr(
        {
            "tirx.noalias": True,
            "tvm_hetero.op_kinds": ["matmul", "add"],
            "tvm_hetero.packed_weights": [1, 16, 1, 2],
        }
    )
    # with T.sblock("root"):
    T_matmul_local = T.sblock_alloc_buffer((16, 32), scope="local")
    for ax1_0_ax0_0_fused in T.parallel(2):
        for ax0_1_init in T.unroll(8):
            for ax1_1_init in T.unroll(2):
                for ax1_2_init in T.vectorized(16):
                    with T.sblock("T_matmul_init"):
                        v_ax0 = T.axis.spatial(16, ax1_0_ax0_0_fused * 8 + ax0_1_init)
                        v_ax1 = T.axis.spatial(32, ax1_1_init * 16 + ax1_2_init)
                        T.reads()
                        T.writes(T_matmul_local[v_ax0, v_ax1])
                        T_matmul_local[v_ax0, v_ax1] = T.float32(0.0)
        for k in range(8):
            for ax0_1 in T.unroll(8):
                for ax1_1 in T.unroll(2):
                    for ax1_2 in T.vectorized(16):
                        with T.sblock("T_matmul_update"):
                            v_ax0 = T.axis.spatial(16, ax1_0_ax0_0_fused * 8 + ax0_1)
                            v_ax1 = T.axis.spatial(32, ax1_1 * 16 + ax1_2)
                            v_k = T.axis.reduce(8, k)
                            T.reads(
                                T_matmul_local[v_ax0, v_ax1],
                                x[v_ax0, v_k],
                                w[v_ax1 // 16, v_k, v_ax1 % 16],
                            )
                            T.writes(T_matmul_local[v_ax0, v_ax1])
                            T_matmul_local[v_ax0, v_ax1] = (
                                T_matmul_local[v_ax0, v_ax1]
                                + x[v_ax0, v_k] * w[v_ax1 // 16, v_k, v_ax1 % 16]
                            )
        for ax0 in T.unroll(8):
            for ax1_0 in T.unroll(2):
                for ax1_1 in T.vectorized(16):
                    with T.sblock("T_add"):
                        v_ax0 = T.axis.spatial(16, ax1_0_ax0_0_fused * 8 + ax0)
                        v_ax1 = T.axis.spatial(32, ax1_0 * 16 + ax1_1)
                        T.reads(T_matmul_local[v_ax0, v_ax1], z[v_ax1])
                        T.writes(T_add[v_ax0, v_ax1])
                        T_add[v_ax0, v_ax1] = T_matmul_local[v_ax0, v_ax1] + z[v_ax1]
