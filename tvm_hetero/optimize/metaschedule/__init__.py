"""MetaSchedule tuning of a placement's kernels, per device, with a database kept on disk
(``compile --tune-trials N --tuning-db DIR``). Kernel schedules only: not the placement search
(``tvm-hetero tune``, :mod:`tvm_hetero.search`, whose records are
:class:`tvm_hetero.search.records.PlacementRecords`).

:func:`tune_kernels` tunes every distinct kernel of the layers a placement puts on each device
(weighted by how often the model calls it) with TVM's MetaSchedule under one global trial
budget, then times each tuned kernel against the same kernel scheduled by the optimization
table's rules, on that device, alone, on the same random arguments. The rule's own ranked
choices (:mod:`tvm_hetero.optimize.choices`: its register tile, its reduction blocks, where
padding runs) are measured there too, each alternative to the heuristic's pick; the fastest
of the rule, its alternatives and MetaSchedule's schedule is what a build uses. The
MetaSchedule database (``database_workload.json``, ``database_tuning_record.json``) and those
comparisons (``choices.json``) live in one directory, a :class:`KernelTuningDatabase`: a later
run reuses every kernel already there instead of tuning it again, and
:func:`tvm_hetero.build` with ``tuning_db=DIR`` schedules a kernel by its tuned schedule (or
the rule with its measured choices) only where that one measured faster than the rule as it
stands. Comparisons made against older default rules (``optimize.RULES_VERSION``) are not
used: the kernel is compared again (and tuned again only when the MetaSchedule database has no
record of it). Comparisons are kept per optimization table (``tune_kernels(..., rules=...)``;
:mod:`.records`): a build under one table never takes a comparison made under another.

With ``kernel_share`` below 1 only the heaviest kernels (by their time under the rules times
their calls) are tuned; kernels whose shapes depend on input values keep their rule.

A kernel is tuned per target: the same convolution on ``cpu`` (znver5) and on
``cpu-generic`` (x86-64) are two workloads, since the best schedule of one is not the other's.

- :mod:`.records`: :class:`KernelTuningDatabase`, :class:`KernelChoice`;
- :mod:`.tuner`: :func:`tune_kernels`, :class:`TuningSummary`;
- :mod:`.builder_pool`: MetaSchedule's builder with its worker processes kept.
"""

from .records import CHOICES_FILE, CHOICES_MARGIN, KernelChoice, KernelTuningDatabase
from .tuner import TuningSummary, tune_kernels

__all__ = ["CHOICES_FILE", "CHOICES_MARGIN", "KernelChoice", "KernelTuningDatabase",
           "TuningSummary", "tune_kernels"]
