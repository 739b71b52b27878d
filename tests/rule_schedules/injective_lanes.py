"""Expected: the ``injective-lanes`` rule's schedule of the kernel of ``test_injective_lanes``
(``tests/test_rule_schedules.py``)."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def main(
    x: T.Buffer((64, 512), "float32"),
    w: T.Buffer((64, 512), "float32"),
    T_multiply: T.Buffer((64, 512), "float32"),
):
    T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["add", "multiply"]})
    # with T.sblock("root"):
    for ax0_ax1_0_fused in T.parallel(512):
        for ax1_1 in T.vectorized(64):
            with T.sblock("T_multiply"):
                v0 = T.axis.spatial(64, ax0_ax1_0_fused // 8)
                v1 = T.axis.spatial(512, ax0_ax1_0_fused % 8 * 64 + ax1_1)
                T.reads(x[v0, v1], w[v0, v1])
                T.writes(T_multiply[v0, v1])
                T_multiply[v0, v1] = (x[v0, v1] + w[v0, v1]) * x[v0, v1]
