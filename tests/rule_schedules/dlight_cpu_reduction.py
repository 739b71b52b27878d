"""Expected: the ``dlight.cpu.Reduction`` rule's schedule of the kernel of
``test_dlight_cpu_reduction`` (``tests/test_rule_schedules.py``)."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def main(x: T.Buffer((8, 4), "float32"), T_subtract: T.Buffer((8, 4), "float32")):
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
