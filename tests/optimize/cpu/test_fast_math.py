"""The ``fast_math`` rule (``tvm_hetero/optimize/cpu/fast_math.py``) on : its schedule at two
shapes, the kernel before and the schedule expected written out in TVMScript and compared with
``tvm.ir.assert_structural_equal`` (as TVM's dlight tests check theirs), and a kernel outside its
preconditions that it declines.

A schedule that changes on purpose: the test's failure prints the new one; read it against the
rule's docstring and paste it over the expected function (``ruff format``).
"""

import tvm
from tvm.script import tirx as T

from tvm_hetero.optimize.cpu.fast_math import fast_math


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


@T.prim_func(s_tir=True, private=True)
def before_8(x: T.Buffer((8,), "float32"), T_power: T.Buffer((8,), "float32")):
    T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["power"]})
    # with T.sblock("root"):
    for ax0 in range(8):
        with T.sblock("T_power"):
            v_ax0 = T.axis.spatial(8, ax0)
            T.reads(x[v_ax0])
            T.writes(T_power[v_ax0])
            T_power[v_ax0] = T.pow(x[v_ax0], T.float32(3.0))


@T.prim_func(s_tir=True, private=True)
def expected_8(x: T.Buffer((8,), "float32"), T_power: T.Buffer((8,), "float32")):
    T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["power"]})
    # with T.sblock("root"):
    for ax0 in range(8):
        with T.sblock("T_power"):
            v_ax0 = T.axis.spatial(8, ax0)
            T.reads(x[v_ax0])
            T.writes(T_power[v_ax0])
            base = T.float32()
            T_power[v_ax0] = T.Let(base * base * base, where={base: x[v_ax0]})


@T.prim_func(s_tir=True, private=True)
def before_4x6_squared(x: T.Buffer((4, 6), "float32"), T_power: T.Buffer((4, 6), "float32")):
    T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["power"]})
    # with T.sblock("root"):
    for ax0, ax1 in T.grid(4, 6):
        with T.sblock("T_power"):
            v_ax0, v_ax1 = T.axis.remap("SS", [ax0, ax1])
            T.reads(x[v_ax0, v_ax1])
            T.writes(T_power[v_ax0, v_ax1])
            T_power[v_ax0, v_ax1] = T.pow(x[v_ax0, v_ax1], T.float32(2.0))


@T.prim_func(s_tir=True, private=True)
def expected_4x6_squared(x: T.Buffer((4, 6), "float32"), T_power: T.Buffer((4, 6), "float32")):
    T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["power"]})
    # with T.sblock("root"):
    for ax0, ax1 in T.grid(4, 6):
        with T.sblock("T_power"):
            v_ax0, v_ax1 = T.axis.remap("SS", [ax0, ax1])
            T.reads(x[v_ax0, v_ax1])
            T.writes(T_power[v_ax0, v_ax1])
            base = T.float32()
            T_power[v_ax0, v_ax1] = T.Let(base * base, where={base: x[v_ax0, v_ax1]})


def test_schedule_8():
    # pow(x, 3) -> let base = x in base * base * base; the loops untouched
    tvm.ir.assert_structural_equal(fast_math(before_8), expected_8)


def test_schedule_4x6_squared():
    # pow(x, 2) -> let base = x in base * base, in a 4 x 6 loop nest
    tvm.ir.assert_structural_equal(fast_math(before_4x6_squared), expected_4x6_squared)
