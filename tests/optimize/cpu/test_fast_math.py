"""``fast_math`` (``tvm_hetero/optimize/cpu/fast_math.py``), the rewrite every CPU kernel gets after
its rule: exp and sigmoid as vector math within float32 accuracy; a small power as products at two
shapes (the kernel before and after written out in TVMScript, compared with
``tvm.ir.assert_structural_equal``), and a kernel without slow math left as it is.
"""

import numpy as np
import tvm
from tvm.script import tirx as T

from tvm_hetero.optimize.cpu.fast_math import fast_math
from tvm_hetero.optimize.pass_ import optimize_function
from tvm_hetero.relax_ir import OP_KINDS_ATTR

from tests.helpers.kernels import run_kernel
from tests.helpers.schedules import add_multiply


# ---------------------------------------------------------------------------------------------
# the schedules: the kernel before, the schedule expected


def test_schedule_8():
    # pow(x, 3) -> let base = x in base * base * base; the loops untouched
    @T.prim_func(s_tir=True, private=True)
    def before(x: T.Buffer((8,), "float32"), T_power: T.Buffer((8,), "float32")):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["power"]})
        # with T.sblock("root"):
        for ax0 in range(8):
            with T.sblock("T_power"):
                v_ax0 = T.axis.spatial(8, ax0)
                T.reads(x[v_ax0])
                T.writes(T_power[v_ax0])
                T_power[v_ax0] = T.pow(x[v_ax0], T.float32(3.0))

    @T.prim_func(s_tir=True, private=True)
    def expected(x: T.Buffer((8,), "float32"), T_power: T.Buffer((8,), "float32")):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["power"]})
        # with T.sblock("root"):
        for ax0 in range(8):
            with T.sblock("T_power"):
                v_ax0 = T.axis.spatial(8, ax0)
                T.reads(x[v_ax0])
                T.writes(T_power[v_ax0])
                base = T.float32()
                T_power[v_ax0] = T.Let(base * base * base, where={base: x[v_ax0]})

    tvm.ir.assert_structural_equal(fast_math(before), expected)


def test_schedule_4x6_squared():
    # pow(x, 2) -> let base = x in base * base, in a 4 x 6 loop nest
    @T.prim_func(s_tir=True, private=True)
    def before(x: T.Buffer((4, 6), "float32"), T_power: T.Buffer((4, 6), "float32")):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["power"]})
        # with T.sblock("root"):
        for ax0, ax1 in T.grid(4, 6):
            with T.sblock("T_power"):
                v_ax0, v_ax1 = T.axis.remap("SS", [ax0, ax1])
                T.reads(x[v_ax0, v_ax1])
                T.writes(T_power[v_ax0, v_ax1])
                T_power[v_ax0, v_ax1] = T.pow(x[v_ax0, v_ax1], T.float32(2.0))

    @T.prim_func(s_tir=True, private=True)
    def expected(x: T.Buffer((4, 6), "float32"), T_power: T.Buffer((4, 6), "float32")):
        T.func_attr({"tirx.noalias": True, "tvm_hetero.op_kinds": ["power"]})
        # with T.sblock("root"):
        for ax0, ax1 in T.grid(4, 6):
            with T.sblock("T_power"):
                v_ax0, v_ax1 = T.axis.remap("SS", [ax0, ax1])
                T.reads(x[v_ax0, v_ax1])
                T.writes(T_power[v_ax0, v_ax1])
                base = T.float32()
                T_power[v_ax0, v_ax1] = T.Let(base * base, where={base: x[v_ax0, v_ax1]})

    tvm.ir.assert_structural_equal(fast_math(before), expected)


def test_leaves_a_kernel_without_slow_math_as_it_is():
    func = add_multiply()
    assert fast_math(func) is func


def _calls(func) -> set[str]:
    import tvm_ffi
    from tvm import ir

    names = set()

    def visit(expr):
        if isinstance(expr, ir.expr.Call):
            names.add(str(getattr(expr.op, "name", "")))
        return expr

    tvm_ffi.structural_map(func.body, visit)
    return names


def test_exp_and_sigmoid_become_vector_math_within_float32_accuracy():
    from tvm import te

    x = te.placeholder((4, 1000), "float32", name="x")
    silu = te.compute(x.shape, lambda i, j: x[i, j] * te.sigmoid(x[i, j]), name="silu")
    y = te.compute(x.shape, lambda i, j: te.exp(silu[i, j]), name="exp")
    func = te.create_prim_func([x, y]).with_attr(OP_KINDS_ATTR, ["multiply", "exp"])
    target = tvm.target.Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    scheduled, rule = optimize_function(func.with_attr("target", target), target)
    assert rule is not None
    assert not _calls(scheduled) & {"tirx.exp", "tirx.sigmoid"}  # no scalar libm calls left
    data = np.linspace(-30, 4, 4000, dtype="float32").reshape(4, 1000)
    got = run_kernel(scheduled, target, [data, np.zeros_like(data)])
    wide = data.astype("float64")
    np.testing.assert_allclose(got, np.exp(wide / (1 + np.exp(-wide))), rtol=2e-6)
