"""Measuring candidate placements: builders, runners, the reference outputs each run is verified
against, device status and profiles, and the Measurer that ties them to the records. Failures
are recorded with an error kind; the search goes on.

- :mod:`.task`: what is measured (:class:`MeasureTask`); :mod:`.result`: what comes back;
- :mod:`.builder`, :mod:`.runner`, :mod:`.rpc`, :mod:`.worker`, :mod:`.pool`: building and
  running candidates in isolated worker processes, locally or behind a TVM RPC tracker;
- :mod:`.measurer`: :class:`Measurer`, the records in front of the builder and runner;
- :mod:`.reference`: the independent reference outputs, tolerances and output verification;
- :mod:`.status`: probed device status (compute rate, memory, bandwidth);
- :mod:`.profiles`: per-layer costs on each device and the transfer fit.
"""

from .builder import Builder, LocalBuilder, placement_key
from .measurer import Measurer
from .reference import outputs_match, relative_errors, tolerance_for
from .result import BuildResult, ErrorKind, MeasureResult
from .rpc import RPCRunner
from .runner import LocalRunner, Runner
from .task import MeasureTask

__all__ = ["BuildResult", "Builder", "ErrorKind", "LocalBuilder", "LocalRunner",
           "MeasureResult", "MeasureTask", "Measurer", "RPCRunner", "Runner", "outputs_match",
           "placement_key", "relative_errors", "tolerance_for"]
