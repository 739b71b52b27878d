import glob
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TUTORIALS = sorted(glob.glob(os.path.join(ROOT, "tutorials", "*.py")))


@pytest.mark.parametrize("path", TUTORIALS, ids=os.path.basename)
def test_tutorial_runs(path, tmp_path):
    args = [sys.executable, path]
    if os.path.basename(path) == "demo.py":
        args += ["--out", str(tmp_path)]
    result = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "CI": "true"})
    assert result.returncode == 0, result.stderr[-3000:]
