"""The ``scan-lines`` CPU rule: the scan kernels of :mod:`tvm_hetero.ops.scan` (cumulative sums
and products). Each line of a scan is independent and its steps are serial, so the lines are
the work to share: where the scanned axis is not the last, the lines along the last axis walk
memory contiguously and go in whole vectors (the serial loop inside then steps a vector of
lines at a time, as onnxruntime's CumSum does); the lines outside are fused and parallel when
the kernel is large enough. A single line stays one serial loop: its schedule."""

from __future__ import annotations

from ...ops.scan import SCAN_BLOCKS
from ...target import vector_lanes
from ..rule import Rule
from .analysis import iterations, loop_extent, walks_contiguously
from .schedule_helpers import MIN_PARALLEL_EXTENT, MIN_PARALLEL_WORK
from .injective_lanes import inner_lanes


def scan_block(sch):
    """The one block of a scan kernel (named by :data:`~tvm_hetero.ops.scan.SCAN_BLOCKS`,
    spatial iterations only, one output), else None."""
    from tvm import tirx

    blocks = sch.get_child_blocks(sch.get_sblock("root")) if _has_root(sch) else []
    if len(blocks) != 1:
        return None
    block = sch.get(blocks[0])
    if block.name_hint not in SCAN_BLOCKS or len(block.writes) != 1 \
            or any(iv.iter_type != tirx.IterVar.DataPar for iv in block.iter_vars):
        return None
    return blocks[0]


def _has_root(sch) -> bool:
    try:
        sch.get_sblock("root")
    except Exception:  # noqa: BLE001 (TVM raises its own error type for a missing block)
        return False
    return True


class ScanLines(Rule):
    """The ``scan-lines`` rule: scans (cumulative sums and products) line by line, the
    contiguous lines in vectors, the others fused and parallel when large."""

    name = "scan-lines"
    description = ("scans (cumulative sums, products): contiguous lines in vectors, the others "
                   "fused and parallel when large; each line's steps serial")
    kinds = ("reduction",)
    families = ("cpu",)

    def apply(self, func, target):
        """Schedule a scan kernel of :mod:`tvm_hetero.ops.scan`; None for any other kernel.

        The block's loops are the lines. Where the last of them walks every buffer
        contiguously (the scan is not along the last axis), it is split into whole vectors of
        the data's dtype (as ``injective-lanes`` splits an inner loop) and vectorized; the
        loops outside are fused and parallel when the scan does ``MIN_PARALLEL_WORK`` steps
        in all.
        """
        import numpy as np
        from tvm import s_tir

        sch = s_tir.Schedule(func)
        block_rv = scan_block(sch)
        if block_rv is None:
            return None
        loops = sch.get_loops(block_rv)
        if any(loop_extent(sch, loop) is None for loop in loops):
            return None
        block = sch.get(block_rv)
        write = block.writes[0]
        steps = max(int(r.extent) for r in write.region)
        work = iterations(sch, loops) * steps
        fp32_lanes, _ = vector_lanes(target)
        lanes = max(1, fp32_lanes * 4 // np.dtype(str(write.source.dtype)).itemsize)
        outer = list(loops)
        inner = outer[-1]
        extent = loop_extent(sch, inner)
        contiguous = len(block.iter_vars) == len(loops) and extent > 1 \
            and walks_contiguously(block, block.iter_vars[-1].var)
        width = inner_lanes(extent, lanes) if contiguous else None
        if width is not None and width > 1:
            outer.pop()
            if width < extent:
                inner_outer, inner = sch.split(inner, [None, width])
                outer.append(inner_outer)
            sch.vectorize(inner)
        if outer:
            fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
            if loop_extent(sch, fused) >= MIN_PARALLEL_EXTENT and work >= MIN_PARALLEL_WORK:
                sch.parallel(fused)
        return sch.mod["main"]
