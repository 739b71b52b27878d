"""Expected: the ``split-k-gemv`` rule's schedule of the kernel of ``test_split_k_gemv``
(``tests/test_rule_schedules.py``)."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def main(
    x: T.Buffer((1, 1024), "float32"),
    w: T.Buffer((1024, 1024), "float32"),
    T_matmul: T.Buffer((1, 1024), "float32"),
):
    T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["matmul"]})
    # with T.sblock("root"):
    T_matmul_rf = T.sblock_alloc_buffer((8, 1, 1024))
    for ax1_0 in T.parallel(8):
        for ax0_init in range(1024):
            with T.sblock("T_matmul_rf_init"):
                vax1_0, v0 = T.axis.remap("SS", [ax1_0, ax0_init])
                T.reads()
                T.writes(T_matmul_rf[vax1_0, 0, v0])
                T_matmul_rf[vax1_0, 0, v0] = T.float32(0.0)
        for ax1_1, ax0 in T.grid(128, 1024):
            with T.sblock("T_matmul_rf_update"):
                vax1_0, v0, vax1_1 = T.axis.remap("SSR", [ax1_0, ax0, ax1_1])
                T.reads(
                    T_matmul_rf[vax1_0, 0, v0],
                    x[0, vax1_0 * 128 + vax1_1],
                    w[vax1_0 * 128 + vax1_1, v0],
                )
                T.writes(T_matmul_rf[vax1_0, 0, v0])
                T_matmul_rf[vax1_0, 0, v0] = (
                    T_matmul_rf[vax1_0, 0, v0]
                    + x[0, vax1_0 * 128 + vax1_1] * w[vax1_0 * 128 + vax1_1, v0]
                )
    for ax0, ax1_0 in T.grid(1024, 8):
        with T.sblock("T_matmul"):
            vax1_0, v0 = T.axis.remap("RS", [ax1_0, ax0])
            T.reads(T_matmul_rf[vax1_0, 0, v0])
            T.writes(T_matmul[0, v0])
            with T.init():
                T_matmul[0, v0] = T.float32(0.0)
            T_matmul[0, v0] = T_matmul[0, v0] + T_matmul_rf[vax1_0, 0, v0]
