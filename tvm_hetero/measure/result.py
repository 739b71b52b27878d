"""Results of building and measuring one candidate placement. Failures are data, not
exceptions: a candidate that fails is recorded with its error kind and the search goes on."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

# A failed candidate's message is cut to this many characters in its record
MAX_MESSAGE_CHARS = 2000


class ErrorKind(str, Enum):
    """Why a candidate has no valid latency."""

    NONE = "ok"
    BUILD_ERROR = "build_error"
    BUILD_TIMEOUT = "build_timeout"
    RUN_ERROR = "run_error"  # an exception, or the worker process crashed (segfault, abort)
    RUN_TIMEOUT = "run_timeout"
    WRONG_ANSWER = "wrong_answer"
    MEMORY_EXCEEDED = "memory_exceeded"


@dataclass
class BuildResult:
    """A built candidate: the library path, or why there is none."""

    artifact: str | None
    error: ErrorKind = ErrorKind.NONE
    message: str = ""
    build_s: float = 0.0
    placement: Any = None  # the Placement it was built from


@dataclass
class MeasureResult:
    """The measured latency of a candidate (milliseconds per inference) or its error.

    Attributes
    ----------
    error : ErrorKind
        ``ErrorKind.NONE`` when the candidate ran and its outputs matched the reference.
    latencies_ms : list of float
        One entry per timed repeat (each the mean of ``number`` calls).
    max_error : float
        Largest relative output error against the reference (NaN when not run).
    rounds_ms : list of float
        For a re-timed candidate: its figure in each alternating round (``latencies_ms`` then
        holds the best of them); empty otherwise.
    """

    error: ErrorKind
    latencies_ms: list[float] = field(default_factory=list)
    message: str = ""
    build_s: float = 0.0
    run_s: float = 0.0
    max_error: float = float("nan")
    rounds_ms: list[float] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error == ErrorKind.NONE and bool(self.latencies_ms)

    @property
    def median_ms(self) -> float:
        """Median latency; infinity for a failed candidate (never a winner)."""
        return float(np.median(self.latencies_ms)) if self.ok else float("inf")

    @property
    def std_ms(self) -> float:
        return float(np.std(self.latencies_ms)) if self.ok else float("nan")

    def to_json(self) -> dict[str, Any]:
        out = {"error": self.error.value, "latencies_ms": list(self.latencies_ms),
               "build_s": round(self.build_s, 4), "run_s": round(self.run_s, 4)}
        if self.message:
            out["message"] = self.message[:2000]
        if np.isfinite(self.max_error):
            out["max_error"] = float(self.max_error)
        if self.rounds_ms:
            out["rounds_ms"] = list(self.rounds_ms)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "MeasureResult":
        return cls(error=ErrorKind(data["error"]),
                   latencies_ms=[float(x) for x in data.get("latencies_ms", [])],
                   message=str(data.get("message", "")), build_s=float(data.get("build_s", 0)),
                   run_s=float(data.get("run_s", 0)),
                   max_error=float(data.get("max_error", float("nan"))),
                   rounds_ms=[float(x) for x in data.get("rounds_ms", [])])
