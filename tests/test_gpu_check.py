"""benchmarks/gpu_check.py: one clear line without a GPU; its --dry-run builds for CUDA."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "gpu_check.py")


def has_gpu() -> bool:
    import tvm

    return bool(tvm.runtime.enabled("cuda")) and tvm.cuda(0).exist


def run_check(*args, cwd):
    return subprocess.run([sys.executable, SCRIPT, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def test_without_a_gpu_it_fails_with_one_error_line(tmp_path):
    if has_gpu():
        pytest.skip("a GPU is present here")
    result = run_check("--workdir", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: no CUDA GPU here"), result.stderr
    assert result.stdout == ""


def test_dry_run_builds_and_exports_the_cuda_placements_without_a_gpu(tmp_path):
    result = run_check("--dry-run", "--models", "mlp", "--workdir", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "building for cpu + cuda (sm_90)" in result.stdout
    for label in ("all-cuda", "half-cuda"):
        path = tmp_path / f"mlp_{label}.so"
        assert path.stat().st_size > 0
        # the exported library holds CUDA kernels (source or binary) for the cuda layers
        assert b"cuda" in path.read_bytes()
