"""Kernels as the rules see them: each reduction over a single point written as the elementwise
computation it is (:func:`fold_unit_reductions`), for every device family, before any rule
(ours or dlight's) schedules the kernel."""

from __future__ import annotations


# The combiners of a reduction's update ``C = op(C, x)`` that fold_unit_reductions rewrites.
_COMBINERS = ("Add", "Mul", "Max", "Min", "And", "Or")


def fold_unit_reductions(func):
    """`func` with each reduction over a single point (every reduction iterator of extent 1: a
    matmul whose inner dimension is 1, a 1x1 convolution of one input channel, a sum over an
    axis of 1) written as the elementwise block it is: ``C = op(init, x)``, no init, its unit
    iterators spatial. `func` itself where nothing folds.

    Why: dlight's ``normalize_prim_func`` drops unit iterators but keeps the block's init, so
    such a block then looks spatial while it still reads its own output; TVM's
    ``reverse_compute_inline`` takes it as a complete producer (a reduction's read of its own
    output is not among its read regions) and folds its consumer into the init and the update
    alike: a bias epilogue ``y = C + b`` became ``y = b`` then ``y = y + x + b``, the bias
    added twice (``parallel-loops``' inlining, dlight's GPU ``Fallback``). Folded, the block is
    what it computes, and an epilogue inlined into it is right. Updates of another form (tuple
    reductions such as argmax, whose several stores ``reverse_compute_inline`` does not take)
    are left as they are."""
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    try:
        root = sch.get_sblock("root")
    except s_tir.ScheduleError:  # a kernel written without blocks (the checked scatters)
        return func
    changed = False
    for block_rv in sch.get_child_blocks(root):
        block = sch.get(block_rv)
        folded = _folded_block(block)
        if folded is not None:
            sch.state.replace(sch.get_sref(block_rv), folded, {block: folded})
            changed = True
    return sch.mod["main"] if changed else func


def _folded_block(block):
    """`block` as an elementwise block when it reduces over a single point (see
    `fold_unit_reductions`), else None."""
    import tvm_ffi
    from tvm import s_tir, tirx
    from tvm.ir.expr import TensorLoad
    from tvm.tirx.analysis import undefined_vars

    init, body = block.init, block.body
    reduce_kind = tirx.IterVar.CommReduce
    reduced = [iv for iv in block.iter_vars if iv.iter_type == reduce_kind]
    if init is None or not reduced or any(
            not isinstance(iv.dom.extent, tirx.IntImm) or int(iv.dom.extent) != 1
            for iv in reduced):
        return None
    if not isinstance(body, tirx.BufferStore) or not isinstance(init, tirx.BufferStore) \
            or not init.buffer.same_as(body.buffer) \
            or not tvm_ffi.structural_equal(list(init.indices), list(body.indices)):
        return None
    value = body.value
    if type(value).__name__ not in _COMBINERS:
        return None

    def is_own_output(expr) -> bool:
        return isinstance(expr, TensorLoad) and expr.source.same_as(body.buffer) \
            and tvm_ffi.structural_equal(list(expr.indices), list(body.indices))

    def reads_own_output(expr) -> bool:  # (a buffer is a free variable of its loads)
        return any(v.same_as(body.buffer) for v in undefined_vars(expr))

    if is_own_output(value.a) and not reads_own_output(value.b):
        combined = type(value)(init.value, value.b)
    elif is_own_output(value.b) and not reads_own_output(value.a):
        combined = type(value)(value.a, init.value)
    else:
        return None
    iter_vars = [tirx.IterVar(iv.dom, iv.var, tirx.IterVar.DataPar)
                 if iv.iter_type == reduce_kind else iv for iv in block.iter_vars]
    return s_tir.SBlock(iter_vars, block.reads, block.writes, block.name_hint,
                        tirx.BufferStore(body.buffer, combined, body.indices), None,
                        block.alloc_buffers, block.match_buffers, block.annotations)


def FoldUnitReductions(families=("cuda", "other")):  # noqa: N802 (TVM pass style)
    """A module pass: :func:`fold_unit_reductions` on every PrimFunc whose target is of one of
    `families` (the GPU kernels dlight schedules in a build without the rules, whose ``Fallback``
    inlines an epilogue into such a block as ``parallel-loops`` did)."""
    import tvm
    from tvm import tirx

    from .rule import family_of

    @tvm.transform.module_pass(opt_level=0, name="tvm_hetero.FoldUnitReductions")
    def fold(mod, _ctx):
        out = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs,
                           global_infos=mod.global_infos)
        for gv, func in mod.functions_items():
            if isinstance(func, tirx.PrimFunc) and func.attrs is not None \
                    and "target" in func.attrs and family_of(func.attrs["target"]) in families:
                out[gv] = fold_unit_reductions(func)
        return out

    return fold


__all__ = ["FoldUnitReductions", "fold_unit_reductions"]
