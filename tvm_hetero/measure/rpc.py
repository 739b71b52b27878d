"""A runner that measures built candidates on devices behind a TVM RPC tracker.

Each candidate gets its own session from the tracker: the library is uploaded, loaded on the
remote side, checked against the reference outputs and timed there. The client side of every
session runs in a worker process that is killed if it hangs, so a lost server, a full queue or
a remote crash is a result, never an exception or a hang in the caller.

TVM 0.27 details this module works around:

- the Relax VM's stateful API (``set_input`` / ``invoke_stateful`` / ``save_function``) copies
  every argument to the VM's first device, so a multi-device ``main`` fails with "Mismatched
  device_id"; the functions are called directly instead;
- a VM function returning a tuple comes back over RPC as an opaque remote object
  (``RPCObjectRef``); its items are fetched with the remote ``ffi.ArraySize`` and
  ``ffi.ArrayGetItem`` functions;
- ``rpc.connect_tracker`` retries a refused connection for 60 s and a tracker request waits
  forever for a key no free server has; the tracker is probed first (reachable, a server under
  the key) and the request runs under a socket timeout.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import struct
import time
from typing import Any, Callable

import numpy as np

from ..errors import error_message
from .pool import WorkerPool
from .result import MAX_MESSAGE_CHARS, BuildResult, ErrorKind, MeasureResult
from .runner import Runner
from .task import MeasureTask

logger = logging.getLogger(__name__)

# Seconds to wait for the tracker to accept a connection and answer a summary request
PROBE_TIMEOUT_S = 10.0
# Slack on top of the request wait and the session for the worker's hard timeout
WORKER_SLACK_S = 30.0


class _Timeout(Exception):
    """Raised inside the worker when a wait ran out of time."""


class RPCRunner(Runner):
    """Measures candidates on remote devices reached through a TVM RPC tracker.

    Candidates are measured one at a time, each in a fresh session requested under `key`. The
    library is run on the devices recorded in it (``hetero_meta()``), so the servers under
    `key` must have those devices.

    Parameters
    ----------
    key : str
        The device key the RPC servers registered with the tracker.
    tracker_host, tracker_port : str, int
        Where the tracker listens (default ``127.0.0.1:9190``).
    priority : int
        Priority of the session requests (default 1).
    session_timeout_s : float
        Seconds one session may last (the server ends it after that: ``run_timeout``), and the
        longest wait for a free server under `key` (default 120).
    warmup, repeat : int
        Untimed calls first, then timed measurements (defaults 2 and 5).
    min_repeat_ms : float
        Each measurement repeats the call until it lasts this long (default 50 ms).
    f_run : callable, optional
        What the worker process runs to measure one library remotely, called with the
        arguments of :func:`measure_remote` (the default) and returning its dict; pickled with
        each submission, like :class:`~tvm_hetero.measure.LocalRunner`'s `f_run`.
    """

    def __init__(self, key: str, tracker_host: str = "127.0.0.1", tracker_port: int = 9190,
                 priority: int = 1, session_timeout_s: float = 120.0, warmup: int = 2,
                 repeat: int = 5, min_repeat_ms: float = 50.0,
                 f_run: Callable[..., dict[str, Any]] | None = None):
        self.key = key
        self.tracker_host = tracker_host
        self.tracker_port = int(tracker_port)
        self.priority = int(priority)
        self.session_timeout_s = float(session_timeout_s)
        self.warmup = int(warmup)
        self.repeat = int(repeat)
        self.min_repeat_ms = float(min_repeat_ms)
        self.f_run = f_run or measure_remote
        # a request waits at most one session timeout, the session lasts at most another
        self._pool = WorkerPool(1, 2 * self.session_timeout_s + WORKER_SLACK_S)

    @property
    def tracker(self) -> str:
        return f"{self.tracker_host}:{self.tracker_port}"

    def run(self, task: MeasureTask, builds: list[BuildResult]) -> list[MeasureResult]:
        results: list[MeasureResult] = []
        tracker: MeasureResult | None = None  # checked once per call, before the first session
        for build in builds:
            if build.error != ErrorKind.NONE:
                results.append(MeasureResult(build.error, message=build.message,
                                             build_s=build.build_s))
                continue
            if tracker is None:
                tracker = self._check_tracker()
            if tracker.error != ErrorKind.NONE:  # no session possible: the same for every build
                results.append(MeasureResult(tracker.error, message=tracker.message,
                                             build_s=build.build_s))
                continue
            results.append(self._run_one(task, build))
        return results

    def _check_tracker(self) -> MeasureResult:
        """``ErrorKind.NONE`` when the tracker answers and a server is registered under the key."""
        try:
            summary = tracker_summary(self.tracker_host, self.tracker_port, PROBE_TIMEOUT_S)
        except OSError as err:
            reason = err.strerror or error_message(err)
            kind = ErrorKind.RUN_TIMEOUT if isinstance(err, TimeoutError) else ErrorKind.RUN_ERROR
            return MeasureResult(kind, message=f"cannot reach the RPC tracker at "
                                               f"{self.tracker}: {reason}")
        except (RuntimeError, ValueError) as err:
            return MeasureResult(ErrorKind.RUN_ERROR,
                                 message=f"RPC tracker at {self.tracker}: {error_message(err)}")
        servers = [info for info in summary.get("server_info", [])
                   if info.get("key") == "server:" + self.key]
        if not servers:
            known = sorted({str(info.get("key", "")).split(":", 1)[-1]
                            for info in summary.get("server_info", [])})
            return MeasureResult(ErrorKind.RUN_ERROR,
                                 message=f"no RPC server registered under key {self.key!r} at "
                                         f"{self.tracker} (keys: {', '.join(known) or 'none'})")
        queue = summary.get("queue_info", {}).get(self.key, {})
        logger.debug("tracker %s: %d server(s) under %r, %s free", self.tracker, len(servers),
                     self.key, queue.get("free", "?"))
        return MeasureResult(ErrorKind.NONE)

    def _run_one(self, task: MeasureTask, build: BuildResult) -> MeasureResult:
        start = time.perf_counter()
        future = self._pool.submit(
            self.f_run, os.path.abspath(build.artifact), self.tracker_host,
            self.tracker_port, self.key, self.priority, self.session_timeout_s,
            task.inputs_file, task.reference_file, self.warmup, self.repeat, self.min_repeat_ms)
        try:
            out = future.result()
        except TimeoutError:
            limit = 2 * self.session_timeout_s + WORKER_SLACK_S
            out = {"error": ErrorKind.RUN_TIMEOUT.value,
                   "message": f"RPC client killed after {limit:g} s"}
        except ChildProcessError as err:
            out = {"error": ErrorKind.RUN_ERROR.value, "message": f"RPC client crashed: "
                                                        f"{error_message(err)}"}
        except Exception as err:  # anything else is still this candidate's result
            out = {"error": ErrorKind.RUN_ERROR.value, "message": error_message(
                err, with_type=True, max_chars=MAX_MESSAGE_CHARS)}
        run_s = time.perf_counter() - start
        error = ErrorKind(out["error"])
        result = MeasureResult(error, list(out.get("latencies_ms", [])) if error == ErrorKind.NONE
                               else [], message=out.get("message", ""), build_s=build.build_s,
                               run_s=run_s, max_error=float(out.get("max_error", float("nan"))))
        if error != ErrorKind.NONE:
            logger.debug("%s on %r: %s: %s", os.path.basename(build.artifact), self.key,
                         error.value, result.message)
        return result


# ----------------------------------------------------------------------------------------------
# tracker protocol and the worker side


def tracker_summary(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """The tracker's summary (``queue_info``, ``server_info``), with a timeout on every step.

    ``rpc.connect_tracker`` retries a refused connection for 60 s and has no read timeout;
    this speaks the same protocol on a socket of our own.

    Raises
    ------
    OSError
        The tracker cannot be reached or does not answer in time (``TimeoutError``).
    RuntimeError
        Something else answers on that port.
    """
    from tvm.rpc import base

    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
        magic = struct.unpack("<i", base.recvall(sock, 4))[0]
        if magic != base.RPC_TRACKER_MAGIC:
            raise RuntimeError("not an RPC tracker")
        base.sendjson(sock, [base.TrackerCode.SUMMARY])
        value = base.recvjson(sock)
    if not isinstance(value, list) or value[0] != base.TrackerCode.SUCCESS:
        raise RuntimeError(f"unexpected summary answer {value!r}")
    return value[1]


def _remote_items(sess, value) -> list:
    """The remote tensors in a VM return value: one tensor, or a (nested) remote tuple."""
    import tvm

    if isinstance(value, tvm.runtime.Tensor):
        return [value]
    # a tuple comes back as an opaque remote object: read it on the remote side
    size = sess.get_function("ffi.ArraySize")
    get = sess.get_function("ffi.ArrayGetItem")
    return [item for i in range(int(size(value))) for item in _remote_items(sess, get(value, i))]


def _request(host: str, port: int, key: str, priority: int, session_timeout_s: float):
    """A session from the tracker, waiting at most `session_timeout_s` for a free server."""
    from tvm import rpc

    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(session_timeout_s)  # this worker process only: the tracker socket
    try:
        tracker = rpc.connect_tracker(host, port)
        try:
            # one try: a retry would reconnect and wait without the timeout
            return tracker.request(key, priority=priority, session_timeout=session_timeout_s,
                                   max_retry=1)
        except RuntimeError as err:
            if "timed out" in str(err):
                raise _Timeout(f"no free RPC server under key {key!r} within "
                               f"{session_timeout_s:g} s") from None
            raise
        finally:
            tracker.close()
    finally:
        socket.setdefaulttimeout(previous)


def measure_remote(lib_path: str, host: str, port: int, key: str, priority: int,
                   session_timeout_s: float, inputs_file: str, reference_file: str,
                   warmup: int, repeat: int, min_repeat_ms: float) -> dict[str, Any]:
    """Measure one library in a remote session (runs in the runner's worker process).

    Returns
    -------
    dict
        ``error`` (an :class:`ErrorKind` value), ``message``, ``max_error`` and
        ``latencies_ms``: plain data, whatever happened.
    """
    try:
        return _measure_remote(lib_path, host, port, key, priority, session_timeout_s,
                               inputs_file, reference_file, warmup, repeat, min_repeat_ms)
    except _Timeout as err:
        return {"error": ErrorKind.RUN_TIMEOUT.value, "message": str(err)}
    except Exception as err:  # every remote or local failure is this candidate's result
        message = error_message(err, with_type=True, max_chars=MAX_MESSAGE_CHARS)
        kind = ErrorKind.RUN_ERROR
        if "RPCSessionTimeoutError" in str(err):
            kind, message = ErrorKind.RUN_TIMEOUT, \
                f"the server ended the session after {session_timeout_s:g} s"
        elif isinstance(err, TimeoutError):
            kind = ErrorKind.RUN_TIMEOUT
        return {"error": kind.value, "message": message}


def _measure_remote(lib_path, host, port, key, priority, session_timeout_s, inputs_file,
                    reference_file, warmup, repeat, min_repeat_ms) -> dict[str, Any]:
    import tvm
    from tvm import relax

    from ..build.annotate import WEIGHTS_FUNC
    from ..build.runtime import META_FORMAT, META_FUNC, match_inputs
    from ..frontend.load import InputSpec
    from .reference import outputs_match

    with np.load(inputs_file, allow_pickle=False) as data:
        inputs = {name: data[name] for name in data.files}
    with np.load(reference_file, allow_pickle=False) as data:
        reference = [data[f"arr_{i}"] for i in range(len(data.files))]

    sess = _request(host, port, key, priority, session_timeout_s)
    remote_name = os.path.basename(lib_path)
    sess.upload(lib_path, target=remote_name)
    lib = sess.load_module(remote_name)

    # the executable describes itself: devices, inputs and their devices, weights
    try:
        probe = relax.VirtualMachine(lib, [sess.cpu(0)])
        meta = json.loads(str(probe[META_FUNC]()))
    except Exception as err:
        raise RuntimeError(f"not an executable built by tvm_hetero "
                           f"({error_message(err, with_type=True)})") from None
    if meta.get("format") != META_FORMAT:
        raise RuntimeError(f"unsupported executable format {meta.get('format')!r}")
    devices = [sess.device(dev["device_type"], int(dev["device_id"])) for dev in meta["devices"]]
    missing = [f"{dev['device_type']}({dev['device_id']})" for dev, remote
               in zip(meta["devices"], devices) if not remote.exist]
    if missing:
        raise RuntimeError(f"the server under {key!r} has no {', '.join(missing)}")
    vm = relax.VirtualMachine(lib, list(devices))  # a copy: the VM may append a CPU

    # weights of devices other than the first, copied there once
    weights = _remote_items(sess, vm[WEIGHTS_FUNC]()) if meta.get("num_weights") else []
    specs = [InputSpec.from_json(spec) for spec in meta["inputs"]]
    from ..frontend.shape_ranges import as_ranges

    arrays = match_inputs(inputs, specs, as_ranges(meta.get("shape_ranges")))
    placed = meta.get("input_devices", [0] * len(arrays))
    args = [tvm.runtime.tensor(arr, devices[dev]) for arr, dev in zip(arrays, placed)]

    outputs = [t.numpy() for t in _remote_items(sess, vm["main"](*args, *weights))]
    ok, max_error = outputs_match(outputs, reference)
    if not ok:
        return {"error": ErrorKind.WRONG_ANSWER.value, "max_error": max_error,
                "message": f"outputs differ from the reference: relative error {max_error:.3g}"}

    # time on the remote side; sync an accelerator if there is one (CPUs are synchronous)
    timer_dev = next((remote for dev, remote in zip(meta["devices"], devices)
                      if dev["device_type"] != "cpu"), devices[0])
    if warmup > 0:
        vm.time_evaluator("main", timer_dev, number=warmup, repeat=1)(*args, *weights)
    timed = vm.time_evaluator("main", timer_dev, number=1, repeat=max(repeat, 1),
                              min_repeat_ms=int(math.ceil(min_repeat_ms)))(*args, *weights)
    latencies = [float(sec) * 1e3 for sec in timed.results]
    return {"error": ErrorKind.NONE.value, "max_error": max_error, "latencies_ms": latencies}
