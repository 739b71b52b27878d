"""Vector-friendly math in every CPU kernel (the optimization pass applies it before the
rules): ``erf`` and ``tanh`` (GELU) as TVM's rational approximations (``topi.fast_erf``,
``topi.fast_tanh``), ``exp`` and ``sigmoid`` (SiLU, squeeze-and-excite gates, softmax) through
``topi.fast_exp``, ``pow`` by a small whole exponent as multiplications.

LLVM lowers ``erf``, ``tanh`` (through ``exp``) and ``pow`` on x86 to scalar libm calls, one per
element even inside vectorized loops (the GELU epilogue of ViT's 197 x 768 -> 3072 matmul: 258
ms of scalar ``erff`` against 10-20 ms for its multiply-adds). The approximations are the
polynomials TVM's own ``FastMathTransform`` uses; measured over [-12, 12] against float64: erf
3.3e-7 and tanh 3.0e-7 absolute (float32 epsilon is 1.2e-7). ``fast_exp`` (a range reduction to
2^n and a degree-7 polynomial, clamped to [-88.4, 88.4]): 1.2e-7 relative over [-20, 20], and
sigmoid through it 2.7e-7 relative over [-60, 60]; on 2^20 elements, 16 lanes, znver4, exp
6.96 -> 0.26 ms, sigmoid 10.0 -> 0.33 ms, SiLU 10.2 -> 1.2 ms (LLVM's ``expf`` is a scalar
call per element).
"""

from __future__ import annotations

import functools

# pow(x, n) with a whole n up to this is written as n - 1 multiplications (GPT-2's x ** 3)
MAX_POWER_AS_PRODUCT = 4


@functools.lru_cache(maxsize=None)
def _approximation(name: str):
    """``(x, expression of x)``: topi's ``fast_<name>`` of one float32 value."""
    import tvm_ffi
    from tvm import s_tir, te, tirx, topi

    x = te.placeholder((1,), "float32", name="x")
    func = te.create_prim_func([x, getattr(topi, f"fast_{name}")(x)])
    sch = s_tir.Schedule(func)
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    for block_rv in blocks[:-1]:  # fast_tanh clamps in blocks of their own
        sch.compute_inline(block_rv)
    value = sch.get(sch.get_child_blocks(sch.get_sblock("root"))[-1]).body.value
    var = tirx.Var("x", "float32")
    return var, tvm_ffi.structural_map(value, lambda e: var if _is_load(e) else e)


def _fresh(name: str):
    """``(x, expression of x)`` of :func:`_approximation` with a variable of its own: each
    call site binds its own (a variable defined twice makes ill-formed TIR)."""
    import tvm_ffi
    from tvm import tirx

    var, body = _approximation(name)
    fresh = tirx.Var("x", "float32")
    return fresh, tvm_ffi.structural_map(body, lambda e: fresh if e.same_as(var) else e)


def _is_load(expr) -> bool:
    return type(expr).__name__ in ("BufferLoad", "TensorLoad")


def _whole_power(call) -> int | None:
    exponent = call.args[1]
    value = getattr(exponent, "value", None)
    if isinstance(value, float) and value.is_integer() and 2 <= value <= MAX_POWER_AS_PRODUCT:
        return int(value)
    return None


def _rewrite(call, exp_and_sigmoid: bool = True):
    from tvm import tirx

    name = getattr(call.op, "name", "")
    if str(call.ty) != "float32":
        return call
    if not exp_and_sigmoid and name in ("tirx.exp", "tirx.sigmoid"):
        return call
    if name in ("tirx.erf", "tirx.tanh", "tirx.exp"):
        var, body = _fresh(name[len("tirx."):])
        return tirx.Let(var, call.args[0], body)
    if name == "tirx.sigmoid":  # 1 / (1 + exp(-x)), as TVM lowers it, with the fast exp
        var, body = _fresh("exp")
        value = tirx.Var("x", "float32")
        one = tirx.const(1.0, "float32")
        return tirx.Let(value, call.args[0],
                        one / (one + tirx.Let(var, tirx.const(0.0, "float32") - value, body)))
    if name == "tirx.pow" and _whole_power(call) is not None:
        var = tirx.Var("base", "float32")
        product = var
        for _ in range(_whole_power(call) - 1):
            product = product * var
        return tirx.Let(var, call.args[0], product)
    return call


def uses_slow_math(func) -> bool:
    """Whether `func` calls float32 ``erf``, ``tanh``, ``exp``, ``sigmoid`` or ``pow`` by a
    small whole exponent."""
    return not fast_math(func).same_as(func)


def fast_math(func, exp_and_sigmoid: bool = True):
    """`func` with its float32 ``erf``, ``tanh`` and ``exp`` calls replaced by TVM's
    approximations, ``sigmoid(x)`` by ``1 / (1 + fast_exp(-x))`` and ``pow(x, n)`` (whole n up
    to `MAX_POWER_AS_PRODUCT`) by products; `func` itself when it has none. Without
    `exp_and_sigmoid` those two stay (the rules before version 14: ``benchmarks/`` A/B)."""
    import tvm_ffi
    from tvm import ir

    def visit(expr):
        return _rewrite(expr, exp_and_sigmoid) if isinstance(expr, ir.expr.Call) else expr

    rewritten = tvm_ffi.structural_map(func, visit)
    if rewritten.same_as(func):
        return func
    return tvm_ffi.structural_map(rewritten, _bool_cast_as_select)


def _bool_cast_as_select(expr):
    """``Cast(float, b)`` of a boolean as ``Select(b, 1, 0)``: TVM 0.27's LowerIntrin fails
    ("IntImm can only take scalar, but boolx16") on a vectorized bool cast bound by the
    approximations' ``Let`` (``Sigmoid(Cast(Less(x, c)))``, generated graph 1126)."""
    from tvm import tirx

    if (isinstance(expr, tirx.Cast) and str(expr.value.ty) == "bool"
            and str(expr.ty).startswith("float")):
        dtype = str(expr.ty)
        return tirx.Select(expr.value, tirx.const(1.0, dtype), tirx.const(0.0, dtype))
    return expr
