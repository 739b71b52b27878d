"""benchmarks/gpu_check.py: a bundle built here runs on TVM's runtime alone (no compiler), its
CUDA libraries load with their kernels compiled here; one clear line without a GPU."""

import glob
import json
import lzma
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "gpu_check.py")
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from gpu_check_lib import bundle as B  # noqa: E402
from gpu_check_lib import runner as R  # noqa: E402


def has_gpu() -> bool:
    import tvm

    return bool(tvm.runtime.enabled("cuda")) and tvm.cuda(0).exist


def needs_cuda_tools():
    missing = [tool for tool in ("nvcc", "gcc") if not shutil.which(tool)]
    if missing:
        pytest.skip(f"compiling CUDA kernels here needs {', '.join(missing)}")


def run_check(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, SCRIPT, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """``gpu_check.py --dry-run``: the small bundle built, then run on the runtime alone."""
    needs_cuda_tools()
    workdir = tmp_path_factory.mktemp("gpu_check")
    result = run_check("--dry-run", "--workdir", str(workdir), cwd=str(workdir))
    return workdir, result


def test_dry_run_runs_the_bundle_on_the_runtime_alone(dry_run):
    workdir, result = dry_run
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    # the runner ran on the copied tvm package, which has no compiler library
    site_lib = workdir / "site" / "tvm" / "lib"
    assert (site_lib / "libtvm_runtime.so").is_file()
    assert not (site_lib / "libtvm_compiler.so").exists()
    assert "runtime only: True; CUDA runtime: loaded; GPU: none" in out
    # the all-cpu library ran and matched onnxruntime (the runner fails otherwise)
    line = next(line for line in out.splitlines() if "all-cpu: loaded and run" in line)
    assert float(line.rsplit(" ", 1)[1]) < 1e-3
    assert "| recommendation_small | " in out
    # every CUDA library loaded (compiling its CUDA module) with the kernels built here:
    # all-cuda and cpu+cuda, two modules, none compiled by the runner
    assert "all-cuda: loaded (not run: no GPU)" in out
    assert "cpu+cuda: loaded (not run: no GPU)" in out
    assert "CUDA kernels: 2 module(s) from the bundle, 0 compiled here" in out


def test_dry_run_bundle_holds_three_placements_and_the_split_puts_tables_on_the_cpu(dry_run):
    workdir, result = dry_run
    assert result.returncode == 0, result.stderr[-3000:]
    staging = workdir / "staging"
    manifest = json.loads((staging / "manifest.json").read_text())
    (model,) = manifest["models"]
    assert set(model["placements"]) == {"all-cpu", "all-cuda", "cpu+cuda"}
    for spec in model["placements"].values():
        for lib in spec["libs"].values():
            assert (staging / lib).stat().st_size > 0
    assert len(glob.glob(str(staging / "kernels" / "*.fatbin"))) == 2
    # tables 2000 x 16 float32 (125 KiB each) are over the 64 KiB cap, nothing else is
    assert model["placements"]["cpu+cuda"]["split"].startswith("cuda cap 64KiB: cpu 2,")


def test_run_without_a_gpu_fails_with_one_error_line(dry_run):
    if has_gpu():
        pytest.skip("a GPU is present here")
    workdir, result = dry_run
    assert result.returncode == 0, result.stderr[-3000:]
    run = run_check("run", "--bundle", str(workdir / "staging"), cwd=str(workdir))
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: no CUDA GPU here"), run.stderr
    assert run.stdout == ""


def test_a_kernel_missing_from_the_bundle_stops_the_load(dry_run, tmp_path):
    """The runtime really asks the bundle's store: with its fatbins gone, loading fails."""
    workdir, result = dry_run
    assert result.returncode == 0, result.stderr[-3000:]
    staging = tmp_path / "staging"
    shutil.copytree(workdir / "staging", staging)
    for path in glob.glob(str(staging / "kernels" / "*.fatbin")):
        os.remove(path)
    env = B.runtime_only_env(site_dir=str(workdir / "site"),
                             libcuda_dir=B.stub_libcuda(str(tmp_path)))
    run = run_check("kernels", "--bundle", str(staging), "--no-compile", env=env)
    assert run.returncode == 2
    assert "CUDA kernels not in" in run.stderr, run.stderr[-2000:]


def test_periodic_weights_repeat_the_first_slices_and_compress():
    from tvm_hetero.testing.suite import SUITE

    model, _ = SUITE["bert_layer"]()
    periodic = B.periodic_weights(model)
    from onnx import numpy_helper

    before = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    changed = 0
    for init in periodic.graph.initializer:
        got, want = numpy_helper.to_array(init), before[init.name]
        assert got.shape == want.shape and got.dtype == want.dtype
        if want.nbytes < B.MIN_PERIODIC_BYTES or want.dtype.kind != "f":
            np.testing.assert_array_equal(got, want)
            continue
        changed += 1
        axis = next(a for a, n in enumerate(want.shape) if n > B.PERIOD)
        head = np.take(want, np.arange(B.PERIOD), axis=axis)
        for start in range(0, want.shape[axis], B.PERIOD):
            stop = min(start + B.PERIOD, want.shape[axis])
            np.testing.assert_array_equal(np.take(got, np.arange(start, stop), axis=axis),
                                          np.take(head, np.arange(stop - start), axis=axis))
    assert changed >= 6  # the embedding, positions, Q/K/V/output and FFN weights
    emb = numpy_helper.to_array(next(i for i in periodic.graph.initializer
                                     if i.name.startswith("emb")))
    assert len(lzma.compress(emb.tobytes(), preset=1)) < emb.nbytes / 100


def test_cap_placement_moves_the_largest_weights_to_the_cpu_until_the_cap_fits():
    import tvm_hetero as th
    from tvm_hetero.testing.recommendation import recommendation_model

    onnx_model, _ = recommendation_model(tables=3, rows=4000, dim=16, dense=32, batch=8)
    model = th.load_model(onnx_model, name="rec")
    layers = th.extract_layers(model)
    cap = 100 * 1024  # each table is 250 KiB; the dense layers a few KiB
    placement = B.cap_placement(layers, cap)
    on_cpu = sorted(layer.name for layer in layers if placement[layer.name] == "cpu")
    tables = sorted(layer.name for layer in layers if layer.param_bytes >= 4000 * 16 * 4)
    assert on_cpu == tables and len(tables) == 3
    assert th.memory_use(layers, placement)["cuda"].total <= cap
    assert B.cap_placement(layers, 2**40).assignment == th.Placement.all_on(
        layers, "cuda").assignment


@pytest.mark.parametrize("name, cls", [
    ("fused_conv2d3_add2_relu1", "conv2d"), ("fused_matmul_add_relu", "matmul"),
    ("layer_norm2", "layer_norm"), ("fused_max_pool2d1", "max_pool2d"),
    ("softmax", "softmax"), ("fused_take1_sum", "take")])
def test_kernel_class(name, cls):
    assert R.kernel_class(name) == cls


def test_cpu_variant_is_the_best_this_cpu_runs():
    manifest = {"cpu_variants": B.CPU_VARIANTS}
    v4 = set(B.CPU_VARIANTS["avx512"]["flags"]) | set(B.CPU_VARIANTS["avx2"]["flags"])
    assert R.pick_cpu_variant(manifest, v4) == "avx512"
    assert R.pick_cpu_variant(manifest, set(B.CPU_VARIANTS["avx2"]["flags"])) == "avx2"
    with pytest.raises(R.CheckError, match="lacks the instructions"):
        R.pick_cpu_variant(manifest, {"sse2"})


def test_table_of_a_gpu_run_gives_the_ratios_and_the_slowest_classes():
    """The GPU run's table (not reachable here but through its rows): the all-cuda time over
    PyTorch eager's, the split over the faster single device, the kernel classes."""
    row = {"model": "m", "layers": 3,
           "ms": {"all-cpu": 4.0, "all-cuda": 3.0, "cpu+cuda": 1.5, "torch eager": 2.0,
                  "torch graph": 1.0},
           "errors": {"all-cpu": 1e-7, "all-cuda": 2e-6, "cpu+cuda": 3e-6, "torch eager": 1e-6,
                      "torch graph": 1e-6},
           "splits": {"cpu+cuda": "cuda cap 32MiB: cpu 2, cuda 1 layers"},
           "classes": [("conv2d", 2.5, 0.8, 3), ("softmax", 0.5, 0.2, 1)], "anchor_note": None,
           "failed": {}}
    lines = []
    R.print_table([row], 1e-3, False, lines.append)
    cells = [cell.strip() for cell in lines[3].split("|")[1:-1]]
    assert cells[:9] == ["m", "3", "4.000", "3.000", "1.500", "2.000", "1.000", "1.50", "0.50"]
    assert cells[9] == "cuda cap 32MiB: cpu 2, cuda 1 layers"
    assert cells[10] == "1e-07/2e-06/3e-06/1e-06/1e-06"
    assert cells[11] == "conv2d 2.50 (80%, 3); softmax 0.50 (20%, 1)"


def test_a_placement_whose_kernels_failed_to_compile_is_reported_and_fails_the_run(
        dry_run, tmp_path):
    workdir, result = dry_run
    assert result.returncode == 0, result.stderr[-3000:]
    staging = tmp_path / "staging"
    shutil.copytree(workdir / "staging", staging)
    manifest = json.loads((staging / "manifest.json").read_text())
    manifest["models"][0]["placements"]["all-cuda"]["error"] = "ptxas error: too much shared"
    (staging / "manifest.json").write_text(json.dumps(manifest))
    env = B.runtime_only_env(site_dir=str(workdir / "site"))
    run = run_check("run", "--bundle", str(staging), "--cpu-only", "--rounds", "1",
                    "--min-repeat-ms", "1", env=env)
    assert run.returncode == 2
    assert "all-cuda: not run: ptxas error: too much shared" in run.stdout
    assert "all-cpu: loaded and run" in run.stdout  # the others still ran
    assert run.stderr.strip().startswith("Error: placements failed"), run.stderr
