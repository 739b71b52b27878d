"""Expected: the ``row-reductions`` rule's schedule of the kernel of ``test_row_reductions``
(``tests/test_rule_schedules.py``)."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def main(x: T.Buffer((128, 64), "float32"), T_softmax_norm: T.Buffer((128, 64), "float32")):
    T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["softmax"]})
    # with T.sblock("root"):
    T_softmax_maxelem = T.sblock_alloc_buffer((128,))
    T_softmax_exp = T.sblock_alloc_buffer((128, 64))
    T_softmax_expsum = T.sblock_alloc_buffer((128,))
    T_softmax_maxelem_rf = T.sblock_alloc_buffer((16, 128))
    T_softmax_expsum_rf = T.sblock_alloc_buffer((16, 128))
    for ax0 in T.parallel(128):
        for ax1 in range(1):
            for ax0_init in T.vectorized(16):
                with T.sblock("T_softmax_maxelem_rf_init"):
                    vax1_1 = T.axis.spatial(16, ax0_init)
                    v0 = T.axis.spatial(128, ax0 + ax1)
                    T.reads()
                    T.writes(T_softmax_maxelem_rf[vax1_1, v0])
                    T_softmax_maxelem_rf[vax1_1, v0] = T.float32(
                        -340282346638528859811704183484516925440.0
                    )
            for ax2 in range(4):
                for ax0_1 in T.vectorized(16):
                    with T.sblock("T_softmax_maxelem_rf_update"):
                        vax1_1 = T.axis.spatial(16, ax0_1)
                        v0 = T.axis.spatial(128, ax0 + ax1)
                        vax1_0 = T.axis.reduce(4, ax2)
                        T.reads(T_softmax_maxelem_rf[vax1_1, v0], x[v0, vax1_0 * 16 + vax1_1])
                        T.writes(T_softmax_maxelem_rf[vax1_1, v0])
                        T_softmax_maxelem_rf[vax1_1, v0] = T.max(
                            T_softmax_maxelem_rf[vax1_1, v0], x[v0, vax1_0 * 16 + vax1_1]
                        )
        for ax0_1, ax1 in T.grid(16, 1):
            with T.sblock("T_softmax_maxelem"):
                vax1_1 = T.axis.reduce(16, ax0_1)
                v0 = T.axis.spatial(128, ax0 + ax1)
                T.reads(T_softmax_maxelem_rf[vax1_1, v0])
                T.writes(T_softmax_maxelem[v0])
                with T.init():
                    T_softmax_maxelem[v0] = T.float32(-340282346638528859811704183484516925440.0)
                T_softmax_maxelem[v0] = T.max(
                    T_softmax_maxelem[v0], T_softmax_maxelem_rf[vax1_1, v0]
                )
        for ax0_ax1_fused in T.vectorized(64):
            with T.sblock("T_softmax_exp"):
                v0, v1 = T.axis.remap("SS", [ax0, ax0_ax1_fused])
                T.reads(x[v0, v1], T_softmax_maxelem[v0])
                T.writes(T_softmax_exp[v0, v1])
                T_softmax_exp[v0, v1] = T.exp(x[v0, v1] - T_softmax_maxelem[v0])
        for ax1 in range(1):
            for ax0_init in T.vectorized(16):
                with T.sblock("T_softmax_expsum_rf_init"):
                    vax1_1 = T.axis.spatial(16, ax0_init)
                    v0 = T.axis.spatial(128, ax0 + ax1)
                    T.reads()
                    T.writes(T_softmax_expsum_rf[vax1_1, v0])
                    T_softmax_expsum_rf[vax1_1, v0] = T.float32(0.0)
            for ax2 in range(4):
                for ax0_1 in T.vectorized(16):
                    with T.sblock("T_softmax_expsum_rf_update"):
                        vax1_1 = T.axis.spatial(16, ax0_1)
                        v0 = T.axis.spatial(128, ax0 + ax1)
                        vax1_0 = T.axis.reduce(4, ax2)
                        T.reads(
                            T_softmax_expsum_rf[vax1_1, v0], T_softmax_exp[v0, vax1_0 * 16 + vax1_1]
                        )
                        T.writes(T_softmax_expsum_rf[vax1_1, v0])
                        T_softmax_expsum_rf[vax1_1, v0] = (
                            T_softmax_expsum_rf[vax1_1, v0]
                            + T_softmax_exp[v0, vax1_0 * 16 + vax1_1]
                        )
        for ax0_1, ax1 in T.grid(16, 1):
            with T.sblock("T_softmax_expsum"):
                vax1_1 = T.axis.reduce(16, ax0_1)
                v0 = T.axis.spatial(128, ax0 + ax1)
                T.reads(T_softmax_expsum_rf[vax1_1, v0])
                T.writes(T_softmax_expsum[v0])
                with T.init():
                    T_softmax_expsum[v0] = T.float32(0.0)
                T_softmax_expsum[v0] = T_softmax_expsum[v0] + T_softmax_expsum_rf[vax1_1, v0]
        for ax1 in T.vectorized(64):
            with T.sblock("T_softmax_norm"):
                v0, v1 = T.axis.remap("SS", [ax0, ax1])
                T.reads(T_softmax_exp[v0, v1], T_softmax_expsum[v0])
                T.writes(T_softmax_norm[v0, v1])
                T.sblock_attr({"axis": 1})
                T_softmax_norm[v0, v1] = T_softmax_exp[v0, v1] / T_softmax_expsum[v0]
