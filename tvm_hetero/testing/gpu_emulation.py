"""Wrong-answer checks for GPU-scheduled kernels on a machine without a GPU.

A kernel scheduled for a GPU (an s_tir schedule: loops bound to ``blockIdx``/``threadIdx``/
``vthread``, buffers in ``shared``, ``shared.dyn``, ``local`` or ``warp`` memory, cooperative
fetch loops, cross-thread reductions) computes the same values as the PrimFunc obtained by
making every thread-bound loop a plain serial loop and every GPU storage scope ``global``
(:func:`emulate_on_cpu`). The barriers a GPU lowering inserts between the thread-bound loop
nests of a block (a fetch into shared memory, then the compute that reads it) order them the
way a serial run does: each nest runs whole before the next. A cooperative fetch nested in a
compute nest (the same ``threadIdx`` tags inside) runs whole for every emulated thread, which
recomputes it but stores the same values. A reduction whose loop is bound to threads (which the
GPU lowering turns into a cross-thread reduction) is a serial reduction. The rewrite is done on
the scheduled, not yet lowered, PrimFunc, so that the CPU lowering compacts its buffers as for
any CPU kernel; the result is built for LLVM and run on seeded random inputs beside the
unscheduled kernel built the same way (:func:`check_gpu_schedule`).

An explicit barrier (``tvm_storage_sync``) in the sequence that a thread loop runs splits
that loop in two (``for t: A; sync; B`` becomes ``for t: A`` then ``for t: B``), innermost
thread loops first, so that the serial run orders them as the barrier does.

What it catches: any wrong value the schedule itself computes: an output element not written
(a wrong split, predicate or bound loop extent), a wrong index in a fetch or in the compute, a
reduction that misses part of its range, a fused epilogue at the wrong place, a launch that
leaves part of an intermediate between launches unwritten (the kernel's own float buffers are
filled with a huge value first: memory freed by an earlier run held the right values); and
loops bound to one thread axis with different extents (the GPU launches one extent per axis,
so some loop runs for threads it does not cover or misses threads), reported before any value
is computed.

What it does not catch (its limits):

- races between threads: a schedule that is only wrong because two threads of a block write the
  same shared element, or read one that another thread writes in the same nest (a missing
  barrier), usually runs right serially;
- memory that a GPU does not share: made global, a ``local`` buffer is one array for all
  threads and a ``shared`` one for all blocks, so a schedule that reads another thread's
  registers or another block's shared memory (which the GPU keeps apart) runs right here;
- the GPU lowering itself: nothing is lowered for the GPU, so warp shuffles
  (``LowerThreadAllreduce``), ``warp`` memory (``LowerWarpMemory``), vectorized shared memory
  accesses, asynchronous copies and the CUDA code generator are not emulated (software
  pipelining is kept and lowered for the CPU, its asynchronous stages dropped); a wrong answer
  that only they produce is not seen;
- resources and speed: shared memory, registers and threads per block are not checked here
  (``benchmarks/gpu_census.py`` does that with nvcc);
- tensor-core schedules (``wmma.*`` / ``m16n8k8.*`` fragments, ``mma``/``ldmatrix``
  intrinsics) and explicit GPU intrinsics (PTX, CUDA, warp shuffles, atomics) have no CPU
  meaning: :func:`emulate_on_cpu` raises :class:`CannotEmulate` for them; so does a barrier
  left inside a thread loop after the splitting (under a serial loop or a condition), where a
  serial run would read what the barrier waits for before it is written;
- inputs are seeded random values: integer inputs are drawn from ``[0, n)`` with ``n`` the
  smallest extent above 1 of the kernel's buffers (at most 64), so that index inputs stay in
  range; a kernel only wrong for other values (large indices, special floats) is not seen.
  Symbolic shapes and scalar parameters are refused (:class:`CannotEmulate`).

Cost: a fetch nested in a compute nest runs once per emulated thread (x128 for dlight's
matmul tile), and shared/local buffers keep their whole logical shape: ResNet-50's kernels
take about a minute on 2 cores (``benchmarks/gpu_emulation_check.py``).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..errors import HeteroError

logger = logging.getLogger(__name__)

# GPU storage scopes that are plain memory of the emulating (serial) program
_EMULATED_SCOPES = ("shared", "shared.dyn", "local", "warp", "local.var")
# Intrinsics that are a barrier between thread-bound loop nests
_BARRIERS = ("tirx.tvm_storage_sync", "tirx.cuda.cta_sync", "tirx.cuda.warp_sync",
             "tirx.ptx.bar_sync", "tirx.ptx.barrier_sync")
# Intrinsics (by name prefix) with no CPU meaning
_GPU_ONLY_PREFIXES = ("tirx.ptx", "tirx.cuda.", "tirx.nvshmem.", "tirx.metal.", "tirx.webgpu.",
                      "tirx.mma_", "tirx.tile.", "tirx.s_tir.cp_async", "tirx.tvm_warp_",
                      "tirx.tvm_thread_allreduce", "tirx.tvm_mma_sync", "tirx.tvm_bmma_sync",
                      "tirx.tvm_load_matrix_sync", "tirx.tvm_store_matrix_sync",
                      "tirx.tvm_fill_fragment", "tirx.tvm_global_barrier_kinit",
                      "tirx.thread_return", "tirx.atomic_add", "tirx.make_filled_simdgroup")
# Loop annotations that only a GPU lowering uses (the CPU code generator warns on them)
_GPU_LOOP_ANNOTATIONS = ("software_pipeline_async_stages", "pragma_vectorize")
# Integer inputs are drawn from [0, n): n is the smallest buffer extent above 1, at most this
_MAX_INTEGER_INPUT = 64


class CannotEmulate(HeteroError):
    """The scheduled kernel uses something that has no serial CPU meaning (a tensor-core
    fragment, a GPU intrinsic, a barrier inside a thread-bound loop, a symbolic shape)."""


class ScheduleMismatch(HeteroError):
    """The emulated GPU schedule computes other values than the unscheduled kernel."""


def emulate_on_cpu(scheduled_func):
    """The serial CPU program of a GPU-scheduled PrimFunc: every thread-bound loop a plain
    serial loop, every GPU storage scope ``global``, each thread loop with explicit barriers in
    its sequence split at them (the barriers then dropped), the ``target`` attribute removed.
    `scheduled_func` itself is left as it is.

    Parameters
    ----------
    scheduled_func : tvm.tirx.PrimFunc
        A kernel scheduled for a GPU (s_tir, not lowered).

    Returns
    -------
    tvm.tirx.PrimFunc
        The same computation for ``tvm.compile(..., target={"kind": "llvm"})``.

    Raises
    ------
    CannotEmulate
        Where the kernel uses a tensor-core fragment scope, a GPU-only intrinsic, a barrier
        that splitting does not take out of its thread loop, or is already lowered
        (``thread_extent`` attributes).
    """
    import tvm_ffi
    from tvm import ir, tirx
    from tvm.tirx.buffer import BufferType

    func = _split_at_barriers(scheduled_func)
    problem = _first_problem(func)
    if problem:
        raise CannotEmulate(problem)
    renamed: dict[Any, Any] = {}  # buffer var -> its global twin

    def buffer_var(var):
        ty = var.ty
        if not isinstance(ty, BufferType) or ty.storage_scope in ("", "global"):
            return var
        if var not in renamed:
            renamed[var] = ir.expr.Var(var.name, BufferType(
                ty.dtype, "global", ty.shape, ty.strides, ty.elem_offset, ty.data_alignment,
                ty.offset_factor, ty.layout, ty.allocated_addr))
        return renamed[var]

    def loop(stmt):
        if stmt.kind == tirx.ForKind.THREAD_BINDING or stmt.thread_binding is not None:
            return tirx.For(stmt.loop_var, stmt.min, stmt.extent, tirx.ForKind.SERIAL,
                            stmt.body, step=stmt.step)
        if any(key in stmt.annotations for key in _GPU_LOOP_ANNOTATIONS):
            kept = {k: v for k, v in stmt.annotations.items() if k not in _GPU_LOOP_ANNOTATIONS}
            return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, stmt.body,
                            annotations=kept, step=stmt.step)
        return stmt

    def barrier(stmt):
        return tirx.Evaluate(0) if _is_barrier(stmt) else stmt

    func = tvm_ffi.structural_map(func, [(ir.expr.Var, buffer_var), (tirx.For, loop),
                                         (tirx.Evaluate, barrier)])
    if "target" in func.attrs:
        func = func.without_attr("target")
    return _poisoned(func)


# What the emulation writes into a kernel's own float buffers before it runs: a missing write
# reads it (memory freed by an earlier run of the same kernel held the right values)
_POISON = {"float16": 1.0e4, "float32": 1.0e30, "float64": 1.0e30}


def _poisoned(func):
    """`func` with its root block's float buffers (intermediates between launches) filled with
    :data:`_POISON` first, so that a launch that leaves part of one unwritten is seen. Integer
    buffers (indices) are left as they are: a poisoned index would read out of bounds."""
    from tvm import s_tir, tirx

    realize = func.body
    if not isinstance(realize, s_tir.SBlockRealize):
        return func
    root = realize.block
    fills = []
    for buf in root.alloc_buffers:
        dtype = str(buf.dtype)
        if dtype not in _POISON or not all(hasattr(d, "value") for d in buf.shape):
            continue
        loops = [tirx.Var(f"poison_{i}", d.ty.dtype if hasattr(d, "ty") else "int64")
                 for i, d in enumerate(buf.shape)]
        stmt = tirx.BufferStore(buf, tirx.FloatImm(dtype, _POISON[dtype]), loops)
        for var, extent in reversed(list(zip(loops, buf.shape))):
            stmt = tirx.For(var, tirx.IntImm(var.ty.dtype, 0), extent, tirx.ForKind.SERIAL,
                            stmt)
        fills.append(stmt)
    if not fills:
        return func
    block = s_tir.SBlock(root.iter_vars, root.reads, root.writes, root.name_hint,
                         tirx.SeqStmt([*fills, root.body]), root.init, root.alloc_buffers,
                         root.match_buffers, root.annotations)
    return func.with_body(s_tir.SBlockRealize(realize.iter_values, realize.predicate, block))


def is_gpu_scheduled(func) -> bool:
    """Whether `func` has a loop bound to a GPU thread axis (a kernel scheduled for a GPU)."""
    from tvm import tirx

    def bound(node) -> bool:
        if isinstance(node, tirx.For) and node.kind == tirx.ForKind.THREAD_BINDING:
            return True
        return any(bound(child) for child in _children(node))

    return bound(func.body)


def thread_extents(func) -> list[dict[str, set]]:
    """The extents of the loops bound to each thread axis, per kernel launch of `func`
    (``[{"blockIdx.x": {16}, "threadIdx.x": {256}}, ...]``). Each outermost thread-bound loop
    nest is a launch of its own (TVM splits the function into one kernel per nest: a
    two-output split is ``split_kernel`` and ``split_kernel_1``); within one, the GPU launches
    one extent per axis, so more than one is a wrong schedule."""
    from tvm import tirx

    kernels: list[dict[str, set]] = []

    def visit(node, extents) -> None:
        if isinstance(node, tirx.For) and node.thread_binding is not None:
            if extents is None:  # the outermost bound loop: a kernel launch of its own
                extents = {}
                kernels.append(extents)
            extent = node.extent.value if hasattr(node.extent, "value") else str(node.extent)
            extents.setdefault(str(node.thread_binding.thread_tag), set()).add(extent)
        for child in _children(node):
            visit(child, extents)

    visit(func.body, None)
    return kernels


def _is_thread_loop(stmt) -> bool:
    """Whether `stmt` is a loop over the threads of a block (``threadIdx``, ``vthread``)."""
    binding = getattr(stmt, "thread_binding", None)
    return binding is not None and str(binding.thread_tag).startswith(("threadIdx", "vthread"))


def _split_at_barriers(func):
    """`func` with each thread loop whose body is a sequence with barriers in it split into
    one copy of the loop per part between barriers (``for t: A; sync; B`` becomes ``for t: A;
    sync; for t': B``), innermost loops first, the barriers kept between the copies, so that a
    serial run of each copy finishes what the barrier waits for. A barrier elsewhere in a
    thread loop (under a serial loop, in a condition) stays inside it."""
    import tvm_ffi
    from tvm import ir, tirx

    def flat(stmt) -> list:
        if isinstance(stmt, tirx.SeqStmt):
            return [s for part in stmt.seq for s in flat(part)]
        return [stmt]

    def split(loop):
        if not _is_thread_loop(loop):
            return loop
        body = flat(loop.body)
        if not any(_is_barrier(s) for s in body):
            return loop
        parts: list[list] = [[]]
        for stmt in body:
            if _is_barrier(stmt):
                parts.append([stmt])
                parts.append([])
            else:
                parts[-1].append(stmt)
        out = []
        for part in parts:
            if len(part) == 1 and _is_barrier(part[0]):
                out.append(part[0])
            elif part:
                var = loop.loop_var if not out else \
                    type(loop.loop_var)(loop.loop_var.name, loop.loop_var.ty)
                seg = part[0] if len(part) == 1 else tirx.SeqStmt(part)
                if not var.same_as(loop.loop_var):
                    old = loop.loop_var
                    seg = tvm_ffi.structural_map(
                        seg, (ir.expr.Var, lambda e, old=old, new=var:
                              new if e.same_as(old) else e))
                out.append(tirx.For(var, loop.min, loop.extent, loop.kind, seg,
                                    loop.thread_binding, loop.annotations, step=loop.step))
        return tirx.SeqStmt(out)

    return tvm_ffi.structural_map(func, (tirx.For, split))


def _is_barrier(stmt) -> bool:
    from tvm import ir, tirx

    return isinstance(stmt, tirx.Evaluate) and isinstance(stmt.value, ir.expr.Call) and \
        getattr(stmt.value.op, "name", "") in _BARRIERS


def _first_problem(func) -> str | None:
    """Why `func` cannot be emulated (the first reason found), or None: a buffer in a GPU
    storage scope other than :data:`_EMULATED_SCOPES`, a GPU-only intrinsic, a barrier inside a
    thread-bound loop, ``thread_extent`` attributes (a lowered kernel)."""
    import tvm_ffi
    from tvm import ir, tirx
    from tvm.tirx.buffer import BufferType

    problems: list[str] = []

    def var(expr):
        ty = expr.ty
        if isinstance(ty, BufferType) and ty.storage_scope not in ("", "global") + \
                _EMULATED_SCOPES:
            problems.append(f"buffer {expr.name} is in GPU storage scope "
                            f"{ty.storage_scope!r} (a tensor-core fragment?), which has no CPU "
                            "emulation")

    def call(expr):
        name = getattr(expr.op, "name", "")
        if name.startswith(_GPU_ONLY_PREFIXES) and name not in _BARRIERS:
            problems.append(f"the kernel calls the GPU intrinsic {name}, which has no CPU "
                            "emulation")

    def visit(node, bound: bool) -> None:
        if isinstance(node, tirx.For):
            bound = bound or _is_thread_loop(node)
        elif isinstance(node, tirx.AttrStmt) and node.attr_key in ("thread_extent",
                                                                   "virtual_thread"):
            problems.append("the kernel is already lowered (thread_extent attributes): "
                            "emulate the scheduled PrimFunc, before lowering")
        elif bound and _is_barrier(node):
            problems.append("the kernel has an explicit barrier inside a thread-bound loop: a "
                            "serial run would read what the barrier waits for before it is "
                            "written")
        for child in _children(node):
            visit(child, bound)

    def expr_visit(node):
        if isinstance(node, ir.expr.Var):
            var(node)
        elif isinstance(node, ir.expr.Call):
            call(node)
        return node

    tvm_ffi.structural_map(func, expr_visit)
    visit(func.body, False)
    return problems[0] if problems else None


def _children(stmt) -> list:
    """The statements directly under `stmt`."""
    from tvm import s_tir, tirx

    if isinstance(stmt, tirx.SeqStmt):
        return list(stmt.seq)
    if isinstance(stmt, s_tir.SBlockRealize):
        return [stmt.block]
    if isinstance(stmt, s_tir.SBlock):
        return [s for s in (stmt.init, stmt.body) if s is not None]
    if isinstance(stmt, tirx.IfThenElse):
        return [s for s in (stmt.then_case, stmt.else_case) if s is not None]
    body = getattr(stmt, "body", None)
    return [body] if isinstance(body, tirx.Stmt) else []


def build_for_cpu(func):
    """`func` built for LLVM (``{"kind": "llvm"}``), its entry point named ``main``."""
    import tvm

    func = func.without_attr("target") if "target" in func.attrs else func
    func = func.with_attr("global_symbol", "main")
    return tvm.compile(tvm.IRModule({"main": func}), target=tvm.target.Target({"kind": "llvm"}))


def index_bounds(func) -> dict[str, int]:
    """``{integer parameter: n}`` for the integer buffer parameters of `func` whose values
    index a buffer: ``n`` the smallest extent of the dimensions they index (a gather_nd's
    indices into a [1, 128] mask: 1), so that their random values stay in range."""
    import tvm_ffi
    from tvm import ir

    params = [p for p in func.params if str(getattr(p.ty, "dtype", "")).startswith(
        ("int", "uint"))]
    copies: list = []  # (intermediate buffer, the parameter its values are copied from)
    bounds: dict[str, int] = {}

    def loaded(expr) -> list:
        found = []

        def visit(node):
            if hasattr(node, "indices") and hasattr(node, "source"):
                found.extend(p for p in params if node.source.same_as(p))
                found.extend(p for b, p in copies if node.source.same_as(b))
            return node

        tvm_ffi.structural_map(expr, visit)
        return found

    def copy(node):  # a store of a parameter's values (a transpose of the indices)
        if hasattr(node, "buffer") and hasattr(node, "value"):
            value = node.value.value if hasattr(node.value, "value") and \
                not hasattr(node.value, "indices") else node.value
            if hasattr(value, "indices") and hasattr(value, "source"):
                copies.extend((node.buffer, p) for p in loaded(value))
        return node

    tvm_ffi.structural_map(func.body, copy)

    def visit(node):
        if hasattr(node, "indices") and (hasattr(node, "source") or hasattr(node, "buffer")):
            buffer = node.source if hasattr(node, "source") else node.buffer
            shape = getattr(getattr(buffer, "ty", None), "shape", None) \
                if isinstance(buffer, ir.expr.Var) else getattr(buffer, "shape", None)
            for index, extent in zip(node.indices, shape or []):
                if not hasattr(extent, "value"):
                    continue
                for param in loaded(index):
                    bounds[param.name] = min(bounds.get(param.name, 1 << 30),
                                             int(extent.value))
        return node

    tvm_ffi.structural_map(func.body, visit)
    return bounds


def random_arguments(func, seed: int = 0) -> list[np.ndarray]:
    """Seeded random arrays for every buffer parameter of `func`: normal floats, booleans,
    integers in ``[0, n)``: ``n`` the smallest extent of the dimensions an integer input
    indexes (:func:`index_bounds`), else the smallest buffer extent above 1; at most 64."""
    indexing = index_bounds(func)
    shapes = []
    for param in func.params:
        ty = param.ty
        if not hasattr(ty, "shape"):
            raise CannotEmulate(f"parameter {param.name} is a scalar, not a buffer")
        if not all(hasattr(dim, "value") for dim in ty.shape):
            raise CannotEmulate(f"parameter {param.name} has a symbolic shape {list(ty.shape)}")
        shapes.append((tuple(int(dim.value) for dim in ty.shape), str(ty.dtype)))
    extents = [d for shape, _ in shapes for d in shape if d > 1]
    bound = min(min(extents, default=2), _MAX_INTEGER_INPUT)
    rng = np.random.default_rng(seed)
    arrays = []
    for (shape, dtype), name in zip(shapes, [p.name for p in func.params]):
        if dtype == "bool":
            arrays.append(rng.integers(0, 2, size=shape).astype(bool))
        elif dtype.startswith(("int", "uint")):
            high = min(max(indexing.get(name, bound), 1), _MAX_INTEGER_INPUT)
            arrays.append(rng.integers(0, high, size=shape).astype(dtype))
        elif dtype.startswith("float") and hasattr(np, dtype):
            arrays.append(rng.standard_normal(size=shape).astype(dtype))
        else:
            raise CannotEmulate(f"no random inputs for dtype {dtype}")
    return arrays


def run_on_cpu(lib, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Every argument of a built kernel after one run on copies of `arrays`."""
    import tvm

    tensors = [tvm.runtime.tensor(np.array(a)) for a in arrays]
    lib["main"](*tensors)
    return [t.numpy() for t in tensors]


# The last references computed: [(function, seed, arguments, results)], so that a schedule and
# its broken variants are checked against one build and run of the same original function
_REFERENCES: list = []
_MAX_REFERENCES = 4


def _reference(original_func, seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The seeded random arguments of `original_func` and its buffers after one run."""
    for func, kept_seed, arrays, results in _REFERENCES:
        if func.same_as(original_func) and kept_seed == seed:
            return arrays, results
    arrays = random_arguments(original_func, seed)
    results = run_on_cpu(build_for_cpu(original_func), arrays)
    _REFERENCES[:] = _REFERENCES[-(_MAX_REFERENCES - 1):] + [(original_func, seed, arrays,
                                                               results)]
    return arrays, results


def buffer_errors(original_func, scheduled_func, seed: int = 0) -> dict[str, float]:
    """Per buffer parameter, the relative error (max |got - want| / max |want|, as
    :func:`tvm_hetero.measure.reference.relative_errors`) of the emulated schedule against the
    unscheduled kernel after one run on the same seeded random arguments; NaN and infinities
    where both have them count as equal. Inputs are compared too: a kernel must not write
    them.

    Raises
    ------
    ScheduleMismatch
        Where loops bound to one thread axis have different extents (the GPU launches one).
    CannotEmulate
        As :func:`emulate_on_cpu`.
    """
    from ..measure.reference import relative_errors

    uneven = {tag: sorted(map(str, ext)) for kernel in thread_extents(scheduled_func)
              for tag, ext in kernel.items() if len(ext) > 1}
    if uneven:
        tag = next(iter(uneven))
        raise ScheduleMismatch(f"loops bound to {tag} have different extents "
                               f"({', '.join(uneven[tag])}): the GPU launches one extent for "
                               "all of them, so some run for threads they do not cover or miss "
                               "threads")
    emulated = emulate_on_cpu(scheduled_func)
    names = [p.name for p in scheduled_func.params]
    signature = [(str(p.ty.dtype), str(list(getattr(p.ty, "shape", [])))) for p in
                 scheduled_func.params]
    if signature != [(str(p.ty.dtype), str(list(getattr(p.ty, "shape", [])))) for p in
                     original_func.params]:
        raise CannotEmulate("the scheduled kernel's parameters (dtypes, shapes) differ from "
                            "the unscheduled kernel's")
    arrays, want = _reference(original_func, seed)
    got = run_on_cpu(build_for_cpu(emulated), arrays)
    errors = {}
    for name, a, b in zip(names, got, want):
        if a.dtype.kind == "f":
            same = (np.isnan(a) & np.isnan(b)) | (np.isinf(b) & (a == b))
            a, b = np.where(same, 0, a), np.where(same, 0, b)
        errors[name] = relative_errors([a], [b])[0]
    logger.debug("emulated schedule: largest relative error %.3g (buffer %s)",
                 max(errors.values(), default=0.0), max(errors, key=errors.get, default=None))
    return errors


def check_gpu_schedule(original_func, scheduled_func, *, seed: int = 0,
                       rtol: float | None = None) -> float:
    """Check that a GPU schedule computes what the unscheduled kernel computes, without a GPU:
    both built for LLVM (the schedule through :func:`emulate_on_cpu`), run on the same seeded
    random arguments, every buffer compared.

    Parameters
    ----------
    original_func : tvm.tirx.PrimFunc
        The unscheduled kernel.
    scheduled_func : tvm.tirx.PrimFunc
        The same kernel scheduled for a GPU (not lowered).
    seed : int
        Seed of the random arguments.
    rtol : float, optional
        Allowed relative error (max |got - want| / max |want| per buffer); by default the
        output dtype's (:func:`tvm_hetero.measure.reference.tolerance_for`: 1e-4 for float32,
        exact for integers and booleans).

    Returns
    -------
    float
        The largest relative error over the buffers.

    Raises
    ------
    ScheduleMismatch
        Where a buffer's error is over the tolerance (the message names the worst buffer), or
        loops bound to one thread axis have different extents.
    CannotEmulate
        Where the schedule uses something :func:`emulate_on_cpu` cannot emulate.
    """
    from ..measure.reference import tolerance_for

    errors = buffer_errors(original_func, scheduled_func, seed)
    dtypes = {p.name: str(p.ty.dtype) for p in scheduled_func.params}
    bad = {name: err for name, err in errors.items()
           if err > (tolerance_for(dtypes[name]) if rtol is None else rtol)}
    if bad:
        name = max(bad, key=bad.get)
        raise ScheduleMismatch(f"the GPU schedule computes wrong values: buffer {name} "
                               f"({dtypes[name]}) relative error {bad[name]:.3g}"
                               + (f" ({len(bad)} buffers wrong)" if len(bad) > 1 else ""))
    return max(errors.values(), default=0.0)


def cuda_build_kernels(model, arch: str = "sm_90") -> dict[str, tuple[Any, Any, str | None]]:
    """Every CUDA kernel of `model` built all on ``cuda@ARCH`` (no GPU needed), with what the
    check needs: ``{kernel: (unscheduled, scheduled, rule)}``, by name, the rule from
    ``compiled.stats.rules`` (:func:`~tvm_hetero.testing.scheduled.built_cuda_kernels`; index
    checks, which run on the host CPU, are left out)."""
    from .scheduled import built_cuda_kernels

    try:
        compiled, kernels = built_cuda_kernels(model, arch)
    except ValueError as err:
        raise CannotEmulate(str(err)) from err
    return {name: (original, scheduled, compiled.stats.rules.get(name))
            for name, (original, scheduled) in sorted(kernels.items())
            if is_gpu_scheduled(scheduled)}


__all__ = ["CannotEmulate", "ScheduleMismatch", "buffer_errors", "build_for_cpu",
           "check_gpu_schedule", "cuda_build_kernels", "emulate_on_cpu", "is_gpu_scheduled",
           "random_arguments", "run_on_cpu", "thread_extents"]
