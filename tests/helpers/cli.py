"""The command line in a fresh process."""

import os
import subprocess
import sys


def run_cli(*args, cwd=None, timeout=600):
    """Run `tvm-hetero ARGS` in a fresh process; returns CompletedProcess (text)."""
    return subprocess.run([sys.executable, "-m", "tvm_hetero.cli.main", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
