"""Expected: the ``tiled`` rule's schedule of the kernel of ``test_tiled``
(``tests/test_rule_schedules.py``)."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def main(
    x: T.Buffer((32, 8), "float32"),
    w: T.Buffer((8, 32), "float32"),
    z: T.Buffer((32,), "float32"),
    T_add: T.Buffer((32, 32), "float32"),
):
    T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["matmul", "add"]})
    # with T.sblock("root"):
    T_matmul = T.sblock_alloc_buffer((32, 32))
    for ax0_0 in T.parallel(2):
        for ax1_0 in range(2):
            for ax0_1_init in T.unroll(16):
                for ax1_1_init in T.vectorized(16):
                    with T.sblock("T_matmul_init"):
                        v0 = T.axis.spatial(32, ax0_0 * 16 + ax0_1_init)
                        v1 = T.axis.spatial(32, ax1_0 * 16 + ax1_1_init)
                        T.reads()
                        T.writes(T_matmul[v0, v1])
                        T_matmul[v0, v1] = T.float32(0.0)
            for ax2 in range(8):
                for ax0_1 in T.unroll(16):
                    for ax1_1 in T.vectorized(16):
                        with T.sblock("T_matmul_update"):
                            v0 = T.axis.spatial(32, ax0_0 * 16 + ax0_1)
                            v1 = T.axis.spatial(32, ax1_0 * 16 + ax1_1)
                            v2 = T.axis.reduce(8, ax2)
                            T.reads(T_matmul[v0, v1], x[v0, v2], w[v2, v1])
                            T.writes(T_matmul[v0, v1])
                            T_matmul[v0, v1] = T_matmul[v0, v1] + x[v0, v2] * w[v2, v1]
            for ax0 in range(16):
                for ax1 in T.vectorized(16):
                    with T.sblock("T_add"):
                        v0 = T.axis.spatial(32, ax0_0 * 16 + ax0)
                        v1 = T.axis.spatial(32, ax1_0 * 16 + ax1)
                        T.reads(T_matmul[v0, v1], z[v1])
                        T.writes(T_add[v0, v1])
                        T_add[v0, v1] = T_matmul[v0, v1] + z[v1]
