import glob
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TUTORIALS = sorted(glob.glob(os.path.join(ROOT, "tutorials", "*.py")))


# tutorials that write files take --out (else they would leave them in a temporary folder)
WRITE_FILES = ("demo.py", "cpu_and_gpu.py")


def _run(path, tmp_path, *extra):
    args = [sys.executable, path, *extra]
    if os.path.basename(path) in WRITE_FILES:
        args += ["--out", str(tmp_path)]
    return subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "CI": "true"})


@pytest.mark.parametrize("path", TUTORIALS, ids=os.path.basename)
def test_tutorial_runs(path, tmp_path):
    result = _run(path, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    if os.path.basename(path) == "cpu_and_gpu.py":  # it ran a build and checked it
        assert "all on cpu  largest relative error" in result.stdout, result.stdout[-3000:]


def test_cpu_and_gpu_fails_over_its_tolerance(tmp_path):
    # its all-CPU build is 2e-6 from onnxruntime: over a tolerance of 0
    result = _run(os.path.join(ROOT, "tutorials", "cpu_and_gpu.py"), tmp_path,
                  "--tolerance", "0")
    assert result.returncode == 1, result.stdout[-3000:]
    assert "error: all on cpu: largest relative error against onnxruntime" in result.stderr
    assert "over the tolerance 0" in result.stderr
