"""Build a placed model into ONE executable, and run it.

- :mod:`.annotate`: the :class:`AnnotateDevice` Relax pass (each layer its device);
- :mod:`.compile`: :func:`build` (prepare, annotate, schedule, per-target compile and link),
  :class:`KernelCache`, :class:`BuildStats`;
- :mod:`.runtime`: :class:`CompiledModel` (run, time, profile, export) and :func:`load`;
- :mod:`.profile`: per-kernel profiles of a built executable;
- :mod:`.cuda_cache`: compiled CUDA kept on disk;
- :mod:`.memory`: the memory a placement needs on each device, against the caps.
"""

from .annotate import AnnotateDevice
from .compile import BuildStats, KernelCache, build
from .memory import MemoryUse, describe_over_cap, fits, format_bytes, memory_use, over_cap
from .profile import KernelProfile, ProfileRow
from .runtime import CompiledModel, LatencySummary, load, time_function

__all__ = ["AnnotateDevice", "BuildStats", "CompiledModel", "KernelCache", "KernelProfile",
           "LatencySummary", "MemoryUse", "ProfileRow", "build", "describe_over_cap", "fits",
           "format_bytes", "load", "memory_use", "over_cap", "time_function"]
