"""
Measure on remote devices through a TVM RPC tracker
===================================================

The devices a model is tuned for are often on another machine (a board, a GPU server). TVM's
RPC tracker is the ecosystem's way to reach them: servers register under a key, clients ask the
tracker for a session. ``RPCRunner`` measures every candidate in such a session: it uploads the
library, checks its outputs against the reference and times it there.

Here the tracker and two servers run on this machine (loopback only). On a real setup you start
them with ``python -m tvm.exec.rpc_tracker`` and ``python -m tvm.exec.rpc_server --tracker
HOST:9190 --key my-board`` and pass ``RPCRunner("my-board", "HOST", 9190)``.
"""

######################################################################
# A tracker and two servers on loopback
# -------------------------------------
import socket

from tvm.rpc.server import Server
from tvm.rpc.tracker import Tracker

import tvm_hetero as th
from tvm_hetero.measure import LocalBuilder, MeasureTask, Measurer, RPCRunner


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


port = free_port()
tracker = Tracker(host="127.0.0.1", port=port, port_end=port + 100, silent=True)
servers = []
for _ in range(2):
    start = free_port()
    servers.append(Server(host="127.0.0.1", port=start, port_end=start + 100,
                          tracker_addr=("127.0.0.1", tracker.port), key="tutorial",
                          silent=True))

######################################################################
# Build here, measure there
# -------------------------
import tempfile  # noqa: E402

devices = th.DeviceSet.parse(["cpu", "cpu-generic"])
task = MeasureTask.create("zoo:cnn", devices, tempfile.mkdtemp(prefix="rpc_tutorial_"))
runner = RPCRunner("tutorial", "127.0.0.1", tracker.port, session_timeout_s=60, repeat=3)
measurer = Measurer(task, LocalBuilder(n_parallel=2), runner)
names = devices.names
candidates = [th.Placement.all_on(task.layers, "cpu"),
              th.Placement.all_on(task.layers, "cpu-generic"),
              th.Placement({l.name: names[i % 2] for i, l in enumerate(task.layers)})]
for placement, result in zip(candidates, measurer.measure(candidates)):
    counts = {d: sum(1 for v in placement.assignment.values() if v == d) for d in names}
    print(f"{counts}: {result.error.value}, {result.median_ms:.3f} ms on the remote side")
    assert result.ok

######################################################################
# The same runner drives a whole search: ``th.tune(model, devices, runner=runner)``.

for server in servers:
    server.terminate()
tracker.terminate()

######################################################################
# Summary
# -------
# ``RPCRunner(key, host, port)`` is a drop-in ``Runner``: failures (no server under the key, a
# lost session, a remote crash) come back as ``run_error`` / ``run_timeout`` results, never as
# exceptions, and nothing listens beyond what you start yourself.
