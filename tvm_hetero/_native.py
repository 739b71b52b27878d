"""Guards for TVM's native code, which writes warnings straight to file descriptor 2."""

from __future__ import annotations

import contextlib
import os
import sys


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
