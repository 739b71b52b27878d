"""CPU rules: turn TVM's naive loops into parallel, vectorized, register-tiled code; one rule
per file, their shared helpers in :mod:`.analysis` (what a rule reads off a kernel) and
:mod:`.schedule_helpers` (the schedule steps rules share). The order they are tried in is the
table's (:mod:`tvm_hetero.optimize.table`).

Every rule keeps each output element's reduction sequential and in order, so results equal
those of the unscheduled loops up to the vector code LLVM emits.
"""

from .blocked_nchwc import BlockedNCHWc
from .concat_copies import ConcatCopies
from .depthwise_nchwc import DepthwiseNCHWc
from .depthwise_rows import DepthwiseRows
from .injective_lanes import InjectiveLanes
from .layout_copies import LayoutCopies
from .packed_matmul import PackedMatmul
from .packed_weights import PACKED_WEIGHTS_ATTR, PackedWeights
from .parallel_loops import ParallelLoops
from .pixel_lanes_1x1 import PixelLanes1x1
from .pooling_rows import PoolingRows
from .reduction_chains import ReductionChains
from .row_reductions import RowReductions
from .split_k_gemv import SplitKGemv
from .strided_depthwise_rows import StridedDepthwiseRows
from .tiled import Tiled
from .winograd import Winograd, is_winograd

__all__ = ["PACKED_WEIGHTS_ATTR", "BlockedNCHWc", "ConcatCopies", "DepthwiseNCHWc", "DepthwiseRows",
           "InjectiveLanes", "LayoutCopies", "PackedMatmul", "PackedWeights", "ParallelLoops",
           "PixelLanes1x1", "PoolingRows", "ReductionChains", "RowReductions", "SplitKGemv",
           "StridedDepthwiseRows", "Tiled", "Winograd", "is_winograd"]
