"""Build here, without a GPU, everything a GPU run of ``gpu_check.py`` needs.

Per model: its weights made periodic (so that the libraries compress), onnxruntime's outputs
as the reference, and the exported libraries of three placements (all-cpu and cpu+cuda once
per CPU variant, all-cuda once). The CUDA kernels of every library are compiled here with
``nvcc`` by loading each library in TVM's runtime against a stand-in ``libcuda.so.1`` (no
GPU here), through the same callback the GPU machine will use (``cuda_kernels``), so that the
keys match what that runtime asks for. ``pack`` makes what a call to the GPU machine carries:
the bundle and TVM's runtime as ``.tar.xz`` and the wheels the runtime and the anchor need.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .cuda_kernels import kernel_key  # noqa: F401  (the keys the runner reads)
from .runner import BUNDLE_FORMAT, MANIFEST, PLACEMENTS

# CPU builds for an x86-64 CPU not known in advance, best first; the runner picks the first
# whose instructions /proc/cpuinfo lists (x86-64-v4: AVX-512 F/BW/CD/DQ/VL; v3: AVX2, FMA)
CPU_VARIANTS = {
    "avx512": {"mcpu": "x86-64-v4",
               "flags": ["avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "avx2",
                         "fma", "bmi2", "f16c", "movbe"]},
    "avx2": {"mcpu": "x86-64-v3", "flags": ["avx2", "fma", "bmi1", "bmi2", "f16c", "movbe"]},
}
DEVICE_CORES = 16  # the lent GPU machine's CPU cores (the CPU targets' num-cores)
KERNELS = "kernels"
PERIOD = 4  # slices of a weight's first long axis that repeat (ResNet-50: 1.3 of 98 MiB unique)
MIN_PERIODIC_BYTES = 64 * 1024

# what a call carries (one folder), and its parts
CARRY = "carry"
MODELS_TAR = "models.tar.xz"
RUNTIME_TAR = "tvm_runtime.tar.xz"
WHEELS = "wheels"
CARRY_LIMIT = 60 * 2**20
ANCHOR_WHEELS = ("onnx2torch==1.5.15",)


@dataclass
class ModelSpec:
    """A checked model: its ONNX graph and inputs, and the cuda memory cap of its split."""

    name: str
    make: Callable[[], tuple]
    cuda_cap: str


def _suite(name: str):
    from tvm_hetero.testing.suite import SUITE

    return SUITE[name]()


def _recommendation(**kwargs):
    from tvm_hetero.testing.recommendation import recommendation_model

    return recommendation_model(**kwargs)


MODELS = {
    "resnet50": ModelSpec("resnet50", lambda: _suite("resnet50"), "32MiB"),
    "bert_layer": ModelSpec("bert_layer", lambda: _suite("bert_layer"), "32MiB"),
    "mobilenet_v2": ModelSpec("mobilenet_v2", lambda: _suite("mobilenet_v2"), "12MiB"),
    "recommendation": ModelSpec("recommendation", _recommendation, "32MiB"),
}


def dry_run_model() -> ModelSpec:
    """A small recommendation model (2 tables of 2000 x 16, dense layers 32 wide, batch 8),
    its tables over a 64 KiB cap: few layers, built in seconds."""
    return ModelSpec("recommendation_small", lambda: _recommendation(
        tables=2, rows=2000, dim=16, dense=32, batch=8, bag=2), "64KiB")


def host_variant() -> str:
    """The best CPU variant this machine runs (``--dry-run`` builds only that one)."""
    from .runner import cpu_flags

    flags = cpu_flags()
    for name, variant in CPU_VARIANTS.items():
        if set(variant["flags"]) <= flags:
            return name
    raise RuntimeError("this CPU has neither AVX-512 (x86-64-v4) nor AVX2 (x86-64-v3)")


def periodic_weights(onnx_model, period: int = PERIOD, min_bytes: int = MIN_PERIODIC_BYTES):
    """A copy of the model whose large float initializers repeat their first `period` slices
    along their first axis longer than `period` (same values, same scale, compressible).

    A layout a build gives a weight (blocked, transposed, Winograd) keeps repeats of that axis
    a short distance apart, so that each library's weights compress to about one period.
    """
    import onnx
    from onnx import numpy_helper

    model = onnx.ModelProto()
    model.CopyFrom(onnx_model)
    for index, init in enumerate(model.graph.initializer):
        array = numpy_helper.to_array(init)
        if array.dtype.kind != "f" or array.nbytes < min_bytes:
            continue
        axes = [axis for axis, extent in enumerate(array.shape) if extent > period]
        if not axes:
            continue
        axis = axes[0]
        head = np.take(array, np.arange(period), axis=axis)
        reps = [1] * array.ndim
        reps[axis] = -(-array.shape[axis] // period)
        tiled = np.take(np.tile(head, reps), np.arange(array.shape[axis]), axis=axis)
        model.graph.initializer[index].CopyFrom(numpy_helper.from_array(
            np.ascontiguousarray(tiled.astype(array.dtype)), init.name))
    return model


def cap_placement(layers, cap_bytes: int, gpu: str = "cuda"):
    """All layers on `gpu`, then those with the largest weights on ``cpu`` until the GPU's
    estimated memory (``tvm_hetero.memory_use``) fits `cap_bytes`."""
    import tvm_hetero as th

    assignment = {layer.name: gpu for layer in layers}
    for layer in sorted(layers, key=lambda layer: -layer.param_bytes):
        use = th.memory_use(layers, th.Placement(assignment)).get(gpu)
        if use is None or use.total <= cap_bytes:
            break
        assignment[layer.name] = "cpu"
    return th.Placement(assignment)


def split_text(placement, cap: str) -> str:
    counts = {"cpu": 0, "cuda": 0}
    for device in placement.assignment.values():
        counts[device] += 1
    return f"cuda cap {cap}: cpu {counts['cpu']}, cuda {counts['cuda']} layers"


def device_set(variant: str, arch: str):
    import tvm_hetero as th

    target = {"kind": "llvm", "mcpu": CPU_VARIANTS[variant]["mcpu"], "num-cores": DEVICE_CORES}
    return th.DeviceSet.parse([f"cpu={json.dumps(target)}", f"cuda@{arch}"])


ENTRY = "entry.json"


def build_model(spec: ModelSpec, bundle: str, arch: str, variants: list[str],
                log: Callable[[str], None], reuse: bool = False) -> dict:
    """Export one model's libraries, inputs, reference and ONNX file; its manifest entry.
    With `reuse`, a model folder finished before (its ``entry.json``) is kept as it is."""
    import onnx

    done = os.path.join(bundle, spec.name, ENTRY)
    if reuse and os.path.isfile(done):
        with open(done) as f:
            entry = json.load(f)
        if entry.get("arch") == arch and entry.get("variants") == variants:
            log(f"{spec.name}: reused from {os.path.dirname(done)}")
            return entry["entry"]

    import tvm_hetero as th
    from tvm_hetero.testing import onnx_reference

    start = time.perf_counter()
    onnx_model, inputs = spec.make()
    onnx_model = periodic_weights(onnx_model)
    model = th.load_model(onnx_model, name=spec.name)
    layers = th.extract_layers(model)
    folder = os.path.join(bundle, spec.name)
    os.makedirs(folder, exist_ok=True)
    onnx.save(onnx_model, os.path.join(folder, "model.onnx"))
    arrays = dict(inputs)
    arrays.update({s.name: inputs[s.source_name or s.name] for s in model.inputs})
    np.savez(os.path.join(folder, "inputs.npz"), **arrays)
    reference = onnx_reference(onnx_model, inputs)
    np.savez(os.path.join(folder, "reference.npz"),
             **{f"out{i}": out for i, out in enumerate(reference)})
    initializers = {init.name for init in onnx_model.graph.initializer}
    entry = {"name": spec.name, "layers": len(layers), "onnx": f"{spec.name}/model.onnx",
             "inputs": f"{spec.name}/inputs.npz", "reference": f"{spec.name}/reference.npz",
             "onnx_inputs": [i.name for i in onnx_model.graph.input if i.name not in initializers],
             "placements": {}}
    split = cap_placement(layers, th.parse_size(spec.cuda_cap))
    placements = {"all-cpu": th.Placement.all_on(layers, "cpu"),
                  "all-cuda": th.Placement.all_on(layers, "cuda"), "cpu+cuda": split}
    for label in PLACEMENTS:
        placement = placements[label]
        on_cpu = any(device == "cpu" for device in placement.assignment.values())
        # all-cuda: one build; its host code for the plainer CPU, which runs on both
        builds = variants if on_cpu else [variants[-1]]
        libs = {}
        for variant in builds:
            lib_start = time.perf_counter()
            name = f"{label.replace('+', '_')}{'.' + variant if on_cpu else ''}.so"
            compiled = th.build(model, placement, device_set(variant, arch))
            compiled.export_library(os.path.join(folder, name))
            libs[variant if on_cpu else "any"] = f"{spec.name}/{name}"
            log(f"  {spec.name} {label} ({variant if on_cpu else 'cuda'}): built in "
                f"{time.perf_counter() - lib_start:.1f} s, "
                f"{os.path.getsize(os.path.join(folder, name)) / 2**20:.1f} MiB")
        entry["placements"][label] = {
            "libs": libs, "cuda": label != "all-cpu",
            "split": split_text(placement, spec.cuda_cap) if label == "cpu+cuda" else label}
    with open(done, "w") as f:
        json.dump({"arch": arch, "variants": variants, "entry": entry}, f, indent=1)
    log(f"{spec.name}: {len(layers)} layers, bundled in {time.perf_counter() - start:.0f} s")
    return entry


STUB_LIBCUDA = r"""
/* A stand-in for the CUDA driver on a machine without one: enough for TVM's CUDA runtime to
   load (and to compile a library's kernels through its callback), every call failing. */
#define NO_DEVICE(name) int name() { return 100; }
NO_DEVICE(cuDeviceGetName) NO_DEVICE(cuFuncSetAttribute) NO_DEVICE(cuLaunchKernelEx)
NO_DEVICE(cuModuleGetFunction) NO_DEVICE(cuModuleLoadData) NO_DEVICE(cuModuleUnload)
NO_DEVICE(cuTensorMapEncodeTiled)
int cuGetErrorName(int e, const char** s) { *s = "CUDA_ERROR_NO_DEVICE"; return 0; }
int cuGetErrorString(int e, const char** s) { *s = "no CUDA driver (stand-in)"; return 0; }
"""


def stub_libcuda(folder: str) -> str:
    """Compile the stand-in ``libcuda.so.1`` into `folder` (gcc); returns the folder."""
    source = os.path.join(folder, "stub_libcuda.c")
    with open(source, "w") as f:
        f.write(STUB_LIBCUDA)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", os.path.join(folder, "libcuda.so.1"),
                    "-Wl,-soname,libcuda.so.1", source], check=True, capture_output=True)
    return folder


def runtime_only_env(site_dir: str | None = None, libcuda_dir: str | None = None) -> dict:
    """The environment of a subprocess running TVM's runtime alone (and a stand-in driver)."""
    env = dict(os.environ, TVM_USE_RUNTIME_LIB="1")
    if site_dir:
        env["PYTHONPATH"] = os.pathsep.join([site_dir] + [p for p in [
            os.environ.get("PYTHONPATH")] if p])
    if libcuda_dir:
        env["LD_LIBRARY_PATH"] = os.pathsep.join([libcuda_dir] + [p for p in [
            os.environ.get("LD_LIBRARY_PATH")] if p])
    return env


def compile_kernels(bundle: str, log: Callable[[str], None]) -> None:
    """Compile every CUDA library's kernels into the bundle (``gpu_check.py kernels`` in a
    runtime-only subprocess against the stand-in driver)."""
    if not shutil.which("nvcc") or not shutil.which("gcc"):
        raise RuntimeError("compiling the CUDA kernels here needs nvcc and gcc")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu_check_stub_") as tmp:
        env = runtime_only_env(libcuda_dir=stub_libcuda(tmp))
        script = os.path.join(os.path.dirname(os.path.dirname(__file__)), "gpu_check.py")
        proc = subprocess.run([sys.executable, script, "kernels", "--bundle", bundle], env=env,
                              capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"compiling the CUDA kernels failed:\n{proc.stdout}{proc.stderr}")
    log(proc.stdout.strip() + f" ({time.perf_counter() - start:.0f} s)")
    with open(os.path.join(bundle, KERNEL_ERRORS)) as f:
        errors = json.load(f)
    with open(os.path.join(bundle, MANIFEST)) as f:
        manifest = json.load(f)
    for model in manifest["models"]:  # a placement with a library that fails is marked
        for spec in model["placements"].values():
            failed = [errors[lib] for lib in spec["libs"].values() if lib in errors]
            if failed:
                spec["error"] = f"its CUDA kernels do not compile: {failed[0]}"
    with open(os.path.join(bundle, MANIFEST), "w") as f:
        json.dump(manifest, f, indent=1)


KERNEL_ERRORS = "kernel_errors.json"


def load_cuda_libraries(bundle: str, compile: bool) -> tuple[int, int, dict]:
    """Load every CUDA library of the bundle in this (runtime-only) process, its kernels
    through the bundle's store; ``(from the bundle, compiled, {library: error})``, the
    libraries whose kernels do not compile written to ``kernel_errors.json`` too."""
    from .cuda_kernels import error_line
    from . import runtime_env
    from .cuda_kernels import KernelStore
    from .runner import read_manifest

    manifest = read_manifest(bundle)
    tvm, missing = runtime_env.load_runtime(cuda=True)
    if missing:
        raise RuntimeError(f"TVM's CUDA runtime did not load: {missing}")
    store = KernelStore(os.path.join(bundle, manifest["kernels"]), manifest["arch"],
                        compile=compile).install()
    errors = {}
    for model in manifest["models"]:
        for spec in model["placements"].values():
            if spec["cuda"]:
                for lib in spec["libs"].values():
                    try:
                        tvm.runtime.load_module(os.path.join(bundle, lib))
                    except Exception as err:  # a kernel nvcc rejects: that library fails
                        if not compile:
                            raise
                        errors[lib] = error_line(err)
    with open(os.path.join(bundle, KERNEL_ERRORS), "w") as f:
        json.dump(errors, f, indent=1)
    return store.hits, store.compiled, errors


def build_bundle(bundle: str, specs: list[ModelSpec], arch: str = "sm_90",
                 variants: list[str] | None = None, log: Callable[[str], None] = print,
                 reuse: bool = False) -> dict:
    """Build every model of `specs` into `bundle` (a folder), its kernels compiled; returns
    the manifest. With `reuse`, models finished by an earlier call are kept."""
    variants = variants or list(CPU_VARIANTS)
    os.makedirs(bundle, exist_ok=True)
    manifest = {"format": BUNDLE_FORMAT, "version": 1, "arch": arch, "kernels": KERNELS,
                "cpu_variants": {v: CPU_VARIANTS[v] for v in variants}, "models": []}
    for spec in specs:
        manifest["models"].append(build_model(spec, bundle, arch, variants, log, reuse))
    with open(os.path.join(bundle, MANIFEST), "w") as f:
        json.dump(manifest, f, indent=1)
    compile_kernels(bundle, log)
    return manifest


def tvm_runtime_tree(dest: str) -> str:
    """Copy the installed ``tvm`` package into `dest`/tvm without its compiler library,
    ``3rdparty`` and ``__pycache__``: TVM's runtime alone, 19 MB. Returns `dest`."""
    import tvm

    source = os.path.dirname(os.path.realpath(tvm.__file__))
    shutil.copytree(source, os.path.join(dest, "tvm"), ignore=shutil.ignore_patterns(
        "libtvm_compiler.so", "3rdparty", "__pycache__", "*.pyc"))
    return dest


def _xz_tar(path: str, folder: str, names: list[str]) -> None:
    """``tar -cJ`` through ``xz -T0`` (multi-threaded, so multi-block: fast to unpack)."""
    if shutil.which("xz") and shutil.which("tar"):
        subprocess.run(["tar", "-C", folder, "-I", "xz -6 -T0", "-cf", path, *names],
                       check=True)
        return
    with tarfile.open(path, "w:xz") as tar:
        for name in names:
            tar.add(os.path.join(folder, name), arcname=name)


def download_wheels(folder: str, log: Callable[[str], None]) -> None:
    """The wheels the GPU machine lacks: tvm-ffi (cp312, the installed version), onnx (cp312,
    used only where the machine has none) and onnx2torch."""
    from importlib.metadata import version

    os.makedirs(folder, exist_ok=True)
    binary = [f"apache-tvm-ffi=={version('apache-tvm-ffi')}", f"onnx=={version('onnx')}"]
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", folder]
    subprocess.run(pip + ["--only-binary=:all:", "--python-version", "3.12", "--implementation",
                          "cp", "--platform", "manylinux_2_28_x86_64", *binary], check=True)
    subprocess.run(pip + list(ANCHOR_WHEELS), check=True)
    log(f"wheels: {', '.join(sorted(os.listdir(folder)))}")


def pack(bundle: str, carry: str, log: Callable[[str], None] = print) -> int:
    """Write what a GPU call carries into `carry`: the bundle and TVM's runtime as ``.tar.xz``
    and the wheels. Returns its size in bytes (at most ``CARRY_LIMIT``)."""
    os.makedirs(carry, exist_ok=True)
    start = time.perf_counter()
    _xz_tar(os.path.join(carry, MODELS_TAR), bundle, sorted(os.listdir(bundle)))
    with tempfile.TemporaryDirectory(prefix="gpu_check_runtime_") as tmp:
        tvm_runtime_tree(tmp)
        _xz_tar(os.path.join(carry, RUNTIME_TAR), tmp, ["tvm"])
    wheels = os.path.join(carry, WHEELS)
    if not os.path.isdir(wheels) or len(os.listdir(wheels)) < 3:
        download_wheels(wheels, log)
    sizes = {}
    for root, _, files in os.walk(carry):
        for name in files:
            sizes[os.path.relpath(os.path.join(root, name), carry)] = os.path.getsize(
                os.path.join(root, name))
    total = sum(sizes.values())
    for name, size in sorted(sizes.items()):
        log(f"  {name}: {size / 2**20:.1f} MiB")
    log(f"carry {carry}: {total / 2**20:.1f} MiB (limit {CARRY_LIMIT / 2**20:.0f}), packed in "
        f"{time.perf_counter() - start:.0f} s")
    if total > CARRY_LIMIT:
        raise RuntimeError(f"{carry} is {total / 2**20:.1f} MiB, over the "
                           f"{CARRY_LIMIT / 2**20:.0f} MiB a GPU call may carry")
    return total
