"""The FMA peak of an LLVM CPU target, measured: the yardstick of the matmul kernels' GFLOP/s.

A kernel of independent vector fused multiply-adds and nothing else (no loads in the loop, no
dependency between the accumulators a step updates), built by TVM for the target and run on
every core the target names: what the FMA units of those cores do per second. It is measured,
not computed from a clock and unit count, so it holds for this machine now (its turbo, its
neighbours); time it in the same process and rounds as the kernels it judges.
"""

from __future__ import annotations

import time

# Accumulators per core: enough independent FMAs to cover their latency on every x86-64 core
# (4-cycle latency x 2 units = 8 in flight; more hides the loop's own cost), within AVX-512's 32
# and AVX2's 16 vector registers. (Sapphire Rapids, 2 vCPUs: 8 to 28 alike, 230-242 GFLOP/s
# a core.)
ACCUMULATORS = {16: 12, 8: 12, 4: 12}


def fma_kernel(lanes: int, threads: int, accumulators: int):
    """A PrimFunc ``fma(out, x, steps)``: `threads` parallel tasks, each `steps` rounds of
    `accumulators` independent `lanes`-wide FMAs (``acc = acc * x + x``), then the
    accumulators stored to ``out`` so that nothing is dead code."""
    from tvm.script import tirx as T

    @T.prim_func
    def fma(out: T.Buffer((threads, accumulators, lanes), "float32"),
            x: T.Buffer((lanes,), "float32"), steps: T.int32):
        for task in T.parallel(threads):
            # "global" buffers inside the task: stack arrays LLVM keeps in registers ("local"
            # ones are allocated in the heap here, and every FMA's result is stored back)
            acc = T.decl_buffer((accumulators, lanes), "float32", scope="global")
            xs = T.decl_buffer((lanes,), "float32", scope="global")
            for lane in T.vectorized(lanes):
                xs[lane] = x[lane]
            for a in T.unroll(accumulators):
                for lane in T.vectorized(lanes):
                    acc[a, lane] = xs[lane] + T.float32(a)
            for _ in range(steps):
                for a in T.unroll(accumulators):
                    for lane in T.vectorized(lanes):
                        acc[a, lane] = T.fma(acc[a, lane], xs[lane], xs[lane])
            for a in T.unroll(accumulators):
                for lane in T.vectorized(lanes):
                    out[task, a, lane] = acc[a, lane]

    return fma


def fma_peak_gflops(target, *, seconds: float = 0.2, rounds: int = 5) -> float:
    """Best float32 GFLOP/s over `rounds` of :func:`fma_kernel` built for `target` (a
    ``tvm.target.Target`` or its JSON dict, an LLVM CPU), one task per core it names
    (``num-cores``, else every CPU this process may use; at most the threads of TVM's pool),
    each round about `seconds` long."""
    import numpy as np
    import tvm

    from ..devices import host_num_cores, runtime_threads, use_every_cpu_thread
    from ..target import vector_lanes

    use_every_cpu_thread()  # TVM's pool would take one thread of two vCPUs
    target = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    lanes, _ = vector_lanes(target)
    threads = int(target.attrs.get("num-cores", 0) or host_num_cores())
    threads = min(threads, runtime_threads())
    accumulators = ACCUMULATORS.get(lanes, 12)
    lib = tvm.tirx.build(fma_kernel(lanes, threads, accumulators), target=target)
    dev = tvm.cpu()
    out = tvm.runtime.tensor(np.zeros((threads, accumulators, lanes), "float32"), dev)
    x = tvm.runtime.tensor(np.full(lanes, 0.5, "float32"), dev)
    flops_per_step = 2 * threads * accumulators * lanes
    steps = 10_000
    lib(out, x, steps)  # the thread pool starts
    start = time.perf_counter()
    lib(out, x, steps)
    elapsed = time.perf_counter() - start
    steps = max(steps, int(steps * seconds / max(elapsed, 1e-6)))
    best = 0.0
    for _ in range(rounds):
        start = time.perf_counter()
        lib(out, x, steps)
        best = max(best, flops_per_step * steps / (time.perf_counter() - start) / 1e9)
    return best
