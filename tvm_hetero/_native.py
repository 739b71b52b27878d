"""Guards for TVM's native code, which writes its log lines straight to file descriptor 2."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading

logger = logging.getLogger(__name__)

# TVM's native log lines: "[06:09:31] /project/src/tirx/op/op.cc:275: Warning: Detected pow..."
_NATIVE_LINE = re.compile(r"^\[\d\d:\d\d:\d\d\] \S+:\d+: (?:Warning: )?(?P<message>.*)$")


@contextlib.contextmanager
def quiet_native_stderr(enabled: bool = True):
    """Silence fd 2 inside the block (failures still arrive as exceptions)."""
    if not enabled:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def native_log_to_logging():
    """Route TVM's native log lines written inside the block to this module's logger at INFO
    (the CLI shows them under ``-v``), each distinct message once, after the block; anything
    else written to fd 2 meanwhile (Python's own logging included) goes on to stderr at once.

    Warnings such as ``Detected pow(x, y) where y >= 3`` or ``Fast mode segfaults when there
    are out-of-bounds indices`` (our index checks guard those gathers) print on every build of
    common models and are noise to a user.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    read_end, write_end = os.pipe()
    messages: list[str] = []
    # the reader only reads and writes file descriptors (never logs): a writer blocked on a
    # full pipe while holding a logging lock cannot deadlock it
    reader = threading.Thread(target=_forward, args=(read_end, os.dup(saved), messages),
                              daemon=True)
    reader.start()
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # the pipe's last write end closes (unless a child process holds it)
        os.close(saved)
        reader.join(timeout=5)
        for message in dict.fromkeys(list(messages)):
            logger.info("TVM: %s", message)


def _forward(read_end: int, out: int, messages: list[str]) -> None:
    """Copy lines from `read_end` to `out` until the pipe's end, keeping TVM's own lines'
    messages in `messages` instead; closes both descriptors."""
    pending = b""
    try:
        while True:
            chunk = os.read(read_end, 65536)
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop() if chunk else b""
            for line in lines if chunk or lines != [b""] else []:
                match = _NATIVE_LINE.match(line.decode("utf-8", "replace"))
                if match is None:
                    os.write(out, line + b"\n")
                else:
                    messages.append(match["message"])
            if not chunk:
                return
    finally:
        os.close(read_end)
        os.close(out)
