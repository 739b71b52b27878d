"""Expected: the ``parallel-loops`` rule's schedule of the kernel of ``test_parallel_loops``
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
    for ax0 in T.parallel(64):
        for ax1 in range(512):
            with T.sblock("T_multiply"):
                v0, v1 = T.axis.remap("SS", [ax0, ax1])
                T.reads(x[v0, v1], w[v0, v1])
                T.writes(T_multiply[v0, v1])
                T_multiply[v0, v1] = (x[v0, v1] + w[v0, v1]) * x[v0, v1]
