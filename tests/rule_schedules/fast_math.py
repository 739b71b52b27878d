"""Expected: ``fast_math``'s rewrite of ``pow(x, 3)`` (``tests/test_rule_schedules.py``)."""

from tvm.script import tirx as T


@T.prim_func(s_tir=True)
def main(x: T.Buffer((8,), "float32"), T_power: T.Buffer((8,), "float32")):
    T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["power"]})
    # with T.sblock("root"):
    for ax0 in range(8):
        with T.sblock("T_power"):
            v_ax0 = T.axis.spatial(8, ax0)
            T.reads(x[v_ax0])
            T.writes(T_power[v_ax0])
            base = T.float32()
            T_power[v_ax0] = T.Let(base * base * base, where={base: x[v_ax0]})
