"""The optimization table, declared in one place: (device family, layer kind) -> the rules
tried in order, the first that returns a scheduled kernel wins.

A table is a value, :class:`RuleTable`, passed to what schedules kernels (``build(...,
rules=table)``, ``OptimizeLayers(table)``, ``tune_kernels(..., rules=table)``), the way TVM's
dlight takes its rules as a list; there is no process-wide table. :func:`default_table` returns
a fresh table of the package's rules, which is what is given no table (``rules=None``) gets;
its ``without``/``with_rule``/``with_rules``/``with_fast_exp`` methods derive variants (an A/B
of two tables builds each with its own, in one process).

Adding a rule: write its class (one file under ``cpu/``) and name it in :func:`default_table`
where it should be tried; a user's own rule goes into a variant,
``default_table().with_rule(family, kind, rule)``, passed to the build.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Iterator, Mapping

from ..layers.classify import LAYER_KINDS
from .cpu import (BlockedNCHWc, ConcatCopies, LayoutCopies, PackedMatmul, PackedWeights,
                  ParallelLoops, PixelLanes1x1, PoolingRows, ReductionChains, SplitKGemv, Tiled,
                  Winograd)
from .cpu.depthwise_nchwc import DepthwiseNCHWc
from .cpu.depthwise_rows import DepthwiseRows
from .cpu.grouped_pixels_1x1 import GroupedPixels1x1
from .cpu.injective_lanes import InjectiveLanes
from .cpu.packed_weights import tiled_fits_better
from .cpu.row_reductions import RowReductions, not_a_matrix_vector_product, reduces_only
from .cpu.scan_lines import ScanLines
from .cpu.separable_resize import SeparableResize
from .cpu.symbolic_loops import SymbolicLoops
from .gpu import DlightRule, gpu_rules
from .gpu.window_tiles import WindowTiles
from .rule import FAMILIES, Rule

# Bumped whenever a default rule changes the code it generates (or how kernels are timed):
# tuning comparisons stored under another version are measured again. CHANGELOG.md says what
# each version changed.
RULES_VERSION = 32


def default_table() -> "RuleTable":
    """A fresh table of the package's own rules for every (family, kind) pair, in the order
    they are tried."""
    parallel = ParallelLoops()  # every CPU kind: the catch-all, TVM's loops made parallel
    table = {}
    for kind in LAYER_KINDS:
        table[("cpu", kind)] = [parallel]
        table[("cuda", kind)] = gpu_rules()  # a GPU kernel must be scheduled: Fallback last
        table[("other", kind)] = gpu_rules("other")
    for family in ("cuda", "other"):  # depthwise/grouped convolutions, pools: window tiles
        for kind in WindowTiles.kinds:
            table[(family, kind)] = [WindowTiles(), *table[(family, kind)]]
    table[("cpu", "conv2d")] = [
        Winograd(),  # only the kernels preparation wrote as Winograd: nothing else fits them
        BlockedNCHWc(),  # only convolutions preparation put in the blocked layout
        DepthwiseNCHWc(),  # only depthwise convolutions preparation put in the blocked layout
        GroupedPixels1x1(),  # only grouped 1x1 convolutions preparation wrote per group
        PixelLanes1x1(),  # NCHW 1x1 stride-1: lanes along the pixels beat lanes along channels
        # packed (lanes along the output channels) before tiled, except where tiled gets whole
        # vectors and packed would gather a residual or re-load a short reduction's weights
        PackedWeights().unless(tiled_fits_better, "tiled's lanes are whole vectors there"),
        DepthwiseRows(),  # depthwise, stride 1, rows of 28 or more: rows of one channel
        Tiled(),  # grouped and other depthwise convolutions, ragged channel counts
        RowReductions(),  # 1x1 maps (squeeze-and-excite): a dot product per output channel
        parallel,
    ]
    table[("cpu", "matmul")] = [
        PackedMatmul(),  # a [K, N] weight parameter, N whole vectors, no batch: panels
        SplitKGemv(),  # large [reduction, output] matrix-vector products only
        Tiled(),
        # [output, reduction] weights, which tiled declines: a dot product per row
        RowReductions().unless(not_a_matrix_vector_product, "not a matrix-vector product"),
        parallel,
    ]
    # windowed pools row by row; global pools (a window of its own per output) as chains
    table[("cpu", "pooling")] = [PoolingRows(), ReductionChains(), parallel]
    # norms (a reduction whose epilogue spans the row: an RMS norm's x * rsqrt(mean of
    # squares)) one row per task, as layer norms; plain reductions several outputs per task
    # (independent add chains); dlight's reduction rule only gets what parallel-loops declines
    # (kernels too small for the thread pool). Norms fell to dlight's rule before, which
    # computes the mean again for every output of the row: a decode step's 1 x 4096 RMS norm
    # 14 ms, 4.5 us as a row; 2 x 64 x 768 under reduction-chains 89 us, as rows 58 us
    table[("cpu", "reduction")] = [
        ScanLines(),  # only the scan kernels of ops.scan (cumsum, cumprod)
        RowReductions().unless(reduces_only, "a plain reduction: independent chains"),
        ReductionChains(), parallel,
        DlightRule("cpu", "Reduction", "TVM dlight CPU rule for reductions",
                   kinds=("reduction",)),
    ]
    # concatenations and layout transforms are elementwise; each rule declines the other's
    # then every other kernel without a reduction, small ones too (parallel-loops declines those)
    table[("cpu", "elementwise")] = [ConcatCopies(), LayoutCopies(), SeparableResize(),
                                     InjectiveLanes(), parallel]
    table[("cpu", "other")] = [SeparableResize(), InjectiveLanes(), parallel]  # gathers (take)
    # softmax, layer norm: one row per task, vector partial sums
    table[("cpu", "normalization")] = [RowReductions(), parallel]
    # kernels over a shape range's symbolic extents that no rule above takes (nor the row
    # loop, tried before any of them): before the catch-all, which would fuse their inner loop
    symbolic = SymbolicLoops()
    for key, rules in table.items():
        if key[0] == "cpu":
            at = rules.index(parallel)
            table[key] = rules[:at] + [symbolic] + rules[at:]
    return RuleTable(table)


def _check_entry(family: str, kind: str, rules: Iterable[Rule]) -> tuple[Rule, ...]:
    """`rules` as a table entry for (`family`, `kind`); ValueError for an unknown pair or a
    rule that does not serve it."""
    if family not in FAMILIES or kind not in LAYER_KINDS:
        raise ValueError(f"unknown (family, kind) ({family!r}, {kind!r}): families "
                         f"{FAMILIES}, kinds {LAYER_KINDS}")
    rules = tuple(rules)
    for rule in rules:
        if not isinstance(rule, Rule):
            raise ValueError(f"not a Rule: {rule!r} (for ({family!r}, {kind!r}))")
        if not rule.serves(family, kind):
            raise ValueError(f"rule {rule.name!r} serves kinds {rule.kinds} on families "
                             f"{rule.families}, not ({family!r}, {kind!r})")
    return rules


class RuleTable(Mapping):
    """An optimization table: ``{(device family, layer kind): (rule, ...)}``, the rules of
    each pair in the order they are tried, and the vector-math option every CPU kernel gets.

    A value: it is never changed in place; the ``with_*``/``without`` methods return a new
    table. Pairs not in it have no rules (a CPU kernel keeps TVM's default loops, a GPU
    kernel fails to build).

    Parameters
    ----------
    entries : mapping of (str, str) to iterable of Rule, optional
        The rules of each (family, kind) pair (families of ``FAMILIES``, kinds of
        ``LAYER_KINDS``); every rule must serve its pair.
    fast_exp : bool
        Rewrite float32 ``exp`` and ``sigmoid`` in every CPU kernel, once scheduled, into
        TVM's vector approximation (``topi.fast_exp``; default True). ``erf``, ``tanh`` and
        small whole powers are rewritten either way (:mod:`.cpu.fast_math`).

    Raises
    ------
    ValueError
        An unknown (family, kind) pair, or a rule that does not serve its pair.
    """

    def __init__(self, entries: Mapping[tuple[str, str], Iterable[Rule]] | None = None, *,
                 fast_exp: bool = True):
        self._entries = {(family, kind): _check_entry(family, kind, rules)
                         for (family, kind), rules in (entries or {}).items()}
        self._fast_exp = bool(fast_exp)

    @property
    def fast_exp(self) -> bool:
        """Whether CPU kernels get the vector ``exp`` and ``sigmoid``."""
        return self._fast_exp

    def __getitem__(self, key: tuple[str, str]) -> tuple[Rule, ...]:
        return self._entries[key]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __eq__(self, other) -> bool:
        return isinstance(other, RuleTable) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return (f"<RuleTable {len(self)} entries, "
                f"{sum(len(rules) for rules in self._entries.values())} rules"
                f"{'' if self.fast_exp else ', no fast exp'}>")

    def rules_for(self, family: str, kind: str) -> list[Rule]:
        """The rules of (`family`, `kind`), in the order they are tried (a new list)."""
        return list(self._entries.get((family, kind), ()))

    def rows(self) -> list[tuple[str, str, list[str]]]:
        """``(family, layer kind, rule names)`` for every (family, kind) pair."""
        return [(family, kind, [rule.name for rule in self._entries.get((family, kind), ())])
                for family in FAMILIES for kind in LAYER_KINDS]

    def _derived(self, entries: dict, fast_exp: bool | None = None) -> "RuleTable":
        return RuleTable(entries, fast_exp=self.fast_exp if fast_exp is None else fast_exp)

    def with_rule(self, family: str, kind: str, rule: Rule,
                  position: int | None = 0) -> "RuleTable":
        """This table with `rule` added for (`family`, `kind`): at `position` in its rules
        (0, the default: tried first; None: last)."""
        rules = self.rules_for(family, kind)
        rules.insert(len(rules) if position is None else position, rule)
        return self.with_rules(family, kind, rules)

    def with_rules(self, family: str, kind: str, rules: Iterable[Rule]) -> "RuleTable":
        """This table with the rules of (`family`, `kind`) replaced by `rules` (none: the
        pair has no rules)."""
        return self._derived({**self._entries, (family, kind): _check_entry(family, kind,
                                                                             rules)})

    def without(self, rule: "str | type[Rule]", family: str | None = None,
                kind: str | None = None) -> "RuleTable":
        """This table without the rules matching `rule` (a rule name, or a :class:`Rule`
        subclass: its instances), in every pair or only those of `family` and/or `kind`."""
        def matches(candidate: Rule) -> bool:
            if isinstance(rule, str):
                return candidate.name == rule
            return isinstance(candidate, rule)

        return self._derived({
            (fam, knd): tuple(r for r in rules if not matches(r))
            if (family is None or fam == family) and (kind is None or knd == kind) else rules
            for (fam, knd), rules in self._entries.items()})

    def with_fast_exp(self, enabled: bool) -> "RuleTable":
        """This table with the vector ``exp``/``sigmoid`` of CPU kernels on or off."""
        return self._derived(dict(self._entries), fast_exp=enabled)

    @functools.cached_property
    def key(self) -> str:
        """A digest of the table (every pair's rules, by :meth:`Rule.fingerprint`, in order,
        and its options): equal for two tables that schedule alike. What a per-kernel record
        made under a table (a tuning comparison) is keyed by."""
        lines = [f"fast_exp={self.fast_exp}"]
        for (family, kind) in sorted(self._entries):
            rules = " ; ".join(rule.fingerprint() for rule in self._entries[(family, kind)])
            lines.append(f"{family}/{kind}: {rules}")
        return hashlib.sha256("\n".join(lines).encode()).hexdigest()

    @property
    def is_default(self) -> bool:
        """Whether this table schedules as :func:`default_table`'s (the same key)."""
        return self.key == _default_key()


@functools.lru_cache(maxsize=1)
def _default_key() -> str:
    return default_table().key


def resolve_table(rules: RuleTable | None) -> RuleTable:
    """`rules`, or a fresh :func:`default_table` when it is None; TypeError for anything
    else."""
    if rules is None:
        return default_table()
    if not isinstance(rules, RuleTable):
        raise TypeError(f"rules must be a RuleTable (optimize.default_table() and its "
                        f"variants) or None, not {type(rules).__name__}")
    return rules


__all__ = ["RULES_VERSION", "RuleTable", "default_table", "resolve_table"]
