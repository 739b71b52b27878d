"""A GPU rule kept to the kernels it schedules without much extra work: dlight's rules where
they are right, the table's next rule where they are not.

dlight's ``GEMV`` and ``Reduction`` pad a short reduction to their lanes (32 for ``GEMV``, up to
1024 for ``Reduction``) and reduce the lanes again, and inline a squeeze-and-excite product's
bias and activation into the multiply over the whole map: ``estimate_tir_flops`` counts 2-5x
the layer's work for a mean over 14 x 14 pixels or a 10-channel squeeze. On a large
matrix-vector product the same rules are within a few percent. :class:`WorkBudget` applies
the rule, counts the scheduled kernel's operations against the kernel's, and declines the
schedule over :data:`MAX_WORK`.

The count (:func:`estimated_flops`) is TVM's ``estimate_tir_flops`` with each ``if_then_else``
branch counted over the outputs that take it: TVM counts both branches for every output, so a
concatenation whose inputs are computed inline (dlight's ``Fallback``) counted every input's
arithmetic for every output of the concatenation (DeepLabV3's ASPP: 11x).
"""

from __future__ import annotations

import logging

from ..rule import Rule

logger = logging.getLogger(__name__)

# Scheduled operations over the kernel's a rule may take (the census goal per kernel).
MAX_WORK = 1.3


def work_ratio(func, scheduled) -> float:
    """:func:`estimated_flops` of `scheduled` over that of `func` (1.0 for a kernel of no
    arithmetic)."""
    before, after = estimated_flops(func), estimated_flops(scheduled)
    return after / before if before > 0 else 1.0


def estimated_flops(func) -> float:
    """The floating-point operations a PrimFunc computes: ``estimate_tir_flops`` less, for
    each ``if_then_else`` in a block's stored value whose condition bounds the block's
    iterators by constants (a concatenation's ``c <= v``, a padding's ``1 <= v and v < 57``),
    the branch not taken by each instance. Other conditions are counted as TVM counts them
    (both branches)."""
    import tvm
    from tvm.s_tir.analysis import estimate_tir_flops

    total = float(estimate_tir_flops(tvm.IRModule({"main": func})))
    return max(total - _untaken_branches(func.body, 1.0, None), 0.0)


def _flops(expr) -> float:
    """``estimate_tir_flops`` of one expression (stored into a scratch buffer)."""
    from tvm import tirx
    from tvm.s_tir.analysis import estimate_tir_flops

    scratch = tirx.decl_buffer((1,), expr.ty.dtype if hasattr(expr, "ty") else expr.dtype,
                               name="scratch")
    return float(estimate_tir_flops(tirx.BufferStore(scratch, expr,
                                                     [tirx.IntImm("int32", 0)])))


def _untaken_branches(stmt, times: float, domain) -> float:
    """What ``estimate_tir_flops`` counts in `stmt` (run `times` times, under a block of
    iterator `domain`: ``[(var, begin, end)]``) for the ``if_then_else`` branches that the
    instances do not take."""
    from tvm import s_tir, tirx

    if isinstance(stmt, tirx.For):
        extent = getattr(stmt.extent, "value", None)
        return _untaken_branches(stmt.body, times * (extent if extent is not None else 1),
                                 domain)
    if isinstance(stmt, s_tir.SBlockRealize):
        block = stmt.block
        domain = [(iv.var, int(iv.dom.min), int(iv.dom.min) + int(iv.dom.extent))
                  for iv in block.iter_vars
                  if isinstance(iv.dom.min, tirx.IntImm) and isinstance(iv.dom.extent,
                                                                          tirx.IntImm)]
        return sum(_untaken_branches(s, times, domain) for s in (block.init, block.body)
                   if s is not None)
    if isinstance(stmt, tirx.BufferStore):
        return times * _overcount(stmt.value, domain) if domain else 0.0
    if isinstance(stmt, tirx.SeqStmt):
        return sum(_untaken_branches(s, times, domain) for s in stmt.seq)
    if isinstance(stmt, tirx.IfThenElse):
        return sum(_untaken_branches(s, times, domain) for s in (stmt.then_case,
                                                                  stmt.else_case)
                   if s is not None)
    body = getattr(stmt, "body", None)
    return _untaken_branches(body, times, domain) if isinstance(body, tirx.Stmt) else 0.0


def _is_if_then_else(expr) -> bool:
    from tvm import ir

    return isinstance(expr, ir.expr.Call) and str(getattr(expr.op, "name", "")).endswith(
        ".if_then_else")


def _expr_children(expr) -> list:
    from tvm import ir

    if isinstance(expr, ir.expr.Call):
        return list(expr.args)
    if hasattr(expr, "indices"):  # a buffer load
        return list(expr.indices)
    return [getattr(expr, name) for name in ("a", "b", "value", "condition", "true_value",
                                             "false_value") if hasattr(expr, name)]


def _overcount(expr, domain) -> float:
    """Per instance, averaged over `domain`: TVM's count of `expr` less the branch-aware
    one."""
    if _is_if_then_else(expr):
        cond, then, other = expr.args
        split = _split_domain(cond, domain)
        if split is None:  # a condition of another form: counted as TVM counts it
            return sum(_overcount(e, domain) for e in expr.args)
        taken, dom_then, dom_else = split
        kept = _flops(cond)
        if taken > 0:
            kept += taken * (_flops(then) - _overcount(then, dom_then))
        if taken < 1:
            kept += (1 - taken) * (_flops(other) - _overcount(other, dom_else))
        return _flops(expr) - kept
    return sum(_overcount(e, domain) for e in _expr_children(expr))


def _split_domain(cond, domain):
    """``(fraction of domain where cond holds, domain where it holds, domain where it does
    not)`` for a condition that bounds iterators of `domain` by constants (comparisons,
    ``and`` of them); None for any other. Where the complement is no box (two bounds), the
    whole domain stands for it."""
    from tvm import tirx

    bounds = _bounds(cond, domain)
    if bounds is None:
        return None
    inside, fraction = [], 1.0
    for var, begin, end in domain:
        lo, hi = bounds.get(var, (begin, end))
        lo, hi = max(lo, begin), min(hi, end)
        fraction *= max(hi - lo, 0) / max(end - begin, 1)
        inside.append((var, lo, max(hi, lo)))
    outside = list(domain)
    if len(bounds) == 1 and not isinstance(cond, tirx.And):
        var = next(iter(bounds))
        i = [k for k, (v, _, _) in enumerate(domain) if v.same_as(var)][0]
        _, begin, end = domain[i]
        lo, hi = bounds[var]
        if lo <= begin:
            outside[i] = (var, max(min(hi, end), begin), end)
        elif hi >= end:
            outside[i] = (var, begin, min(max(lo, begin), end))
    return fraction, inside, outside


def _bounds(cond, domain):
    """``{var: (begin, end)}`` that `cond` keeps iterators of `domain` in, or None."""
    from tvm import tirx

    if isinstance(cond, tirx.And):
        left, right = _bounds(cond.a, domain), _bounds(cond.b, domain)
        if left is None or right is None:
            return None
        out = dict(left)
        for var, (lo, hi) in right.items():
            old = out.get(var, (lo, hi))
            out[var] = (max(old[0], lo), min(old[1], hi))
        return out
    ops = {tirx.LT: "<", tirx.LE: "<=", tirx.GT: ">", tirx.GE: ">="}
    op = next((name for kind, name in ops.items() if isinstance(cond, kind)), None)
    if op is None:
        return None
    a, b = cond.a, cond.b
    var = next((v for v, _, _ in domain if v.same_as(a) or v.same_as(b)), None)
    if var is None:
        return None
    if var.same_as(b):  # c op v -> v op' c
        a, b = b, a
        op = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}[op]
    if not isinstance(b, tirx.IntImm):
        return None
    c = int(b.value)
    big = 1 << 62
    return {var: {"<": (-big, c), "<=": (-big, c + 1), ">": (c + 1, big),
                  ">=": (c, big)}[op]}


class WorkBudget(Rule):
    """`rule`, declining the kernels whose schedule by it does more than `max_work` times the
    kernel's operations (``estimate_tir_flops``: padding, recomputation)."""

    def __init__(self, rule: Rule, max_work: float = MAX_WORK):
        self.rule, self.max_work = rule, float(max_work)
        self.name, self.description = rule.name, rule.description
        self.kinds, self.families = rule.kinds, rule.families

    def apply(self, func, target):
        scheduled = self.rule.apply(func, target)
        if scheduled is None:
            return None
        ratio = work_ratio(func, scheduled)
        if ratio > self.max_work:
            logger.debug("%s declines the kernel: %.2fx its work > %.2fx", self.name, ratio,
                         self.max_work)
            return None
        return scheduled

    def fingerprint(self) -> str:
        return f"{self.rule.fingerprint()} within {self.max_work:g}x work"


__all__ = ["MAX_WORK", "WorkBudget", "estimated_flops", "work_ratio"]
