"""What one build-and-run of a generated graph came to (:class:`Outcome`), the outcomes of a
graph (:class:`GraphResult`), the comparison with onnxruntime and the tables of a run."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from ...devices import host_cpu_model as cpu_name  # the CPU named in the table


TOLERANCE = 1e-4
DEVICES = ("cpu", "cpu-generic")
OUTCOMES = ("pass", "mismatch", "crash", "hang", "refused")
FAILURES = ("mismatch", "crash", "hang")
# the builds and runs of one graph: ours all on cpu, ours placed, plain TVM
RUNS = ("cpu", "placed", "plain")
SLOW_BUILD_S = 20.0
_SEVERITY = {"hang": 4, "crash": 3, "mismatch": 2, "refused": 1, "pass": 0}


@dataclass
class Outcome:
    """One build-and-run of a graph.

    Attributes
    ----------
    status : str
        One of :data:`OUTCOMES`.
    detail : str
        One line: what failed (stage and message) or which output differs.
    error : float
        The largest relative error over the outputs (0 when none was compared).
    build_s : float or None
        Seconds of the build (None when it did not finish).
    rules : dict
        Kernel -> the rule that scheduled it (ours; None: TVM's default loops).
    kernel_s : dict
        Kernel -> seconds of its code generation (the placed build, compiled per kernel).
    rule_errors : list of str
        Rules that raised on a kernel and were passed over (the build took the next rule).
    output : int or None
        The output that differs most (mismatch).
    """

    status: str
    detail: str = ""
    error: float = 0.0
    build_s: float | None = None
    rules: dict = field(default_factory=dict)
    kernel_s: dict = field(default_factory=dict)
    rule_errors: list = field(default_factory=list)
    output: int | None = None

    @property
    def failed(self) -> bool:
        return self.status in FAILURES

    def signature(self) -> str:
        """The failure class: the status, and for a crash its message without names and
        numbers (a deletion that changes a buffer's name keeps the class)."""
        if self.status != "crash":
            return self.status
        text = re.sub(r"0x[0-9a-fA-F]+", "0x", self.detail)  # pointers
        text = re.sub(r"\b\w*_\w*\b", "_", text)
        return "crash: " + re.sub(r"\d+", "N", text)[:160]


@dataclass
class GraphResult:
    """The outcomes of one generated graph."""

    seed: int
    nodes: int
    ops: list[str]
    outcomes: dict[str, Outcome]
    placement_devices: list[str] = field(default_factory=list)

    @property
    def ours(self) -> Outcome:
        """The worse of our two builds."""
        cpu, placed = self.outcomes["cpu"], self.outcomes["placed"]
        return placed if _SEVERITY[placed.status] > _SEVERITY[cpu.status] else cpu

    @property
    def ours_fail_plain_pass(self) -> bool:
        return self.ours.failed and self.outcomes["plain"].status == "pass"

    def failing_run(self) -> str | None:
        """Our run to reduce: ``cpu`` when it fails (deterministic), else ``placed``."""
        for run in ("cpu", "placed"):
            if self.outcomes[run].failed:
                return run
        return None


# ----------------------------------------------------------------------------------------------
# comparing outputs


def compare(got: list, want: list) -> tuple[float, str, int | None]:
    """(largest relative error, what differs or "", the output that differs most).

    The relative error of an output is max |got - want| / max |want| over its finite
    elements; NaN or inf where the reference has none (or the other way), another shape,
    dtype or number of outputs is an infinite error.
    """
    if len(got) != len(want):
        return math.inf, f"{len(got)} outputs, {len(want)} expected", None
    worst, worst_index = 0.0, None
    for index, (a, b) in enumerate(zip(got, want)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return math.inf, f"output {index}: shape {a.shape}, {b.shape} expected", index
        if a.dtype != b.dtype:
            return math.inf, f"output {index}: dtype {a.dtype}, {b.dtype} expected", index
        if a.dtype.kind not in "fc":
            if not np.array_equal(a, b):
                return math.inf, f"output {index}: values differ", index
            continue
        fa, fb = np.isfinite(a), np.isfinite(b)
        if not np.array_equal(fa, fb) or not np.array_equal(a[~fa], b[~fb], equal_nan=True):
            return math.inf, (f"output {index}: {int((~fa).sum())} NaN/inf, onnxruntime "
                              f"{int((~fb).sum())}"), index
        if not fa.any():
            continue
        diff = np.abs(a[fa].astype(np.float64) - b[fb].astype(np.float64)).max()
        error = float(diff / (np.abs(b[fb].astype(np.float64)).max() + 1e-30))
        if error > worst:
            worst, worst_index = error, index
    if worst >= TOLERANCE:
        return worst, f"output {worst_index}: relative error {worst:.3g}", worst_index
    return worst, "", worst_index


def onnxruntime_outputs(model, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's (CPU) outputs of an ONNX model."""
    from ...measure.reference import reference_session

    return reference_session(model).run(None, inputs)


def one_line(err: BaseException, limit: int = 300) -> str:
    from ...errors import error_message

    return error_message(err, with_type=True, max_chars=limit)


# ----------------------------------------------------------------------------------------------
# tables


def outcome_counts(results: list[GraphResult]) -> dict[str, dict[str, int]]:
    """``{column: {outcome: count}}`` for ours on cpu, ours placed, ours (worse of the two)
    and plain TVM."""
    columns = {"ours cpu": lambda r: r.outcomes["cpu"], "ours placed": lambda r: r.outcomes[
        "placed"], "ours (either)": lambda r: r.ours, "plain TVM": lambda r: r.outcomes["plain"]}
    counts = {}
    for column, get in columns.items():
        counts[column] = dict.fromkeys(OUTCOMES, 0)
        for result in results:
            counts[column][get(result).status] += 1
    return counts


__all__ = ["DEVICES", "FAILURES", "GraphResult", "OUTCOMES", "Outcome", "RUNS", "SLOW_BUILD_S",
           "TOLERANCE", "compare", "cpu_name", "one_line", "onnxruntime_outputs", "outcome_counts"]
