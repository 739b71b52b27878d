"""Run a bundle made by ``gpu_check.py build`` on a GPU machine, with TVM's runtime alone.

Imports numpy, ``tvm.runtime`` (``load_module``, ``vm.VirtualMachine``, ``tensor``,
``time_evaluator``) and, for the anchor, PyTorch: nothing that needs TVM's compiler and
nothing of tvm_hetero (whose import needs it). Per model of the bundle's manifest it loads the
all-cpu, all-cuda and cpu+cuda libraries (the CPU ones in the variant this CPU runs), checks
every output against onnxruntime's (computed where the bundle was built), times them and the
PyTorch anchor alternately (best median of the rounds), and times the all-cuda build's kernels
one by one through the VM's instrument. Prints one table.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import runtime_env
from .cuda_kernels import KernelStore, error_line

MANIFEST = "manifest.json"
BUNDLE_FORMAT = "tvm_hetero.gpu_check_bundle"
PLACEMENTS = ("all-cpu", "all-cuda", "cpu+cuda")


class CheckError(Exception):
    """A condition that ends the check with one error line."""


def read_manifest(bundle: str) -> dict:
    path = os.path.join(bundle, MANIFEST)
    if not os.path.isfile(path):
        raise CheckError(f"no bundle at {bundle} ({MANIFEST} missing); make it with "
                         "`python benchmarks/gpu_check.py build --bundle DIR`")
    with open(path) as f:
        manifest = json.load(f)
    if manifest.get("format") != BUNDLE_FORMAT:
        raise CheckError(f"{path} is not a gpu_check bundle")
    return manifest


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_model() -> str:
    # tvm_hetero.devices.host_cpu_model's reading: tvm_hetero does not import where TVM's
    # compiler is absent (the GPU machine), so the runner keeps its own
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def pick_cpu_variant(manifest: dict, flags: set[str]) -> str:
    """The first of the bundle's CPU variants (best first) whose instructions this CPU has."""
    for name, variant in manifest["cpu_variants"].items():
        if set(variant["flags"]) <= flags:
            return name
    wanted = "; ".join(f"{name}: {' '.join(v['flags'])}" for name, v in
                       manifest["cpu_variants"].items())
    raise CheckError(f"this CPU lacks the instructions of every CPU build in the bundle ({wanted})")


def max_relative_error(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    """Largest ``max |got - want| / max |want|`` over the outputs (inf on a shape mismatch)."""
    if len(got) != len(want):
        return float("inf")
    worst = 0.0
    for g, w in zip(got, want):
        g, w = np.asarray(g, dtype=np.float64), np.asarray(w, dtype=np.float64)
        if g.shape != w.shape:
            return float("inf")
        scale = max(float(np.max(np.abs(w))), 1e-30) if w.size else 1.0
        diff = float(np.max(np.abs(g - w))) if w.size else 0.0
        worst = max(worst, diff / scale if np.isfinite(diff) else float("inf"))
    return worst


def to_numpy(tvm, value) -> list[np.ndarray]:
    if isinstance(value, tvm.runtime.Tensor):
        return [value.numpy()]
    return [arr for item in value for arr in to_numpy(tvm, item)]


def kernel_class(name: str) -> str:
    """A kernel's class from its name: its first op, digits and ``fused_`` dropped
    (``fused_conv2d3_add2_relu1`` -> ``conv2d``)."""
    parts = [p for p in re.sub(r"\d+(_|$)", r"\1", name).split("_") if p]
    if parts and parts[0] == "fused":
        parts = parts[1:]
    for width in (3, 2):  # keep known two/three-word ops whole
        head = "_".join(parts[:width])
        if head in ("layer_norm", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
                    "global_avg_pool2d", "batch_matmul", "group_norm", "rms_norm"):
            return head
    return parts[0] if parts else name


@dataclass
class Placed:
    """One library loaded on its devices, with its inputs placed."""

    label: str
    path: str
    vm: object
    args: list
    sync_device: object
    split: str
    outputs: list = field(default_factory=list)

    def run(self, tvm) -> list[np.ndarray]:
        return to_numpy(tvm, self.vm["main"](*self.args))

    def timer(self, repeat: int, min_repeat_ms: float) -> Callable[[], float]:
        """The median ms of `repeat` measurements of at least `min_repeat_ms` each
        (TVM's ``time_evaluator`` on the VM, synchronising the GPU when it is used)."""
        self.vm.save_function("main", "gpu_check_main", *self.args, include_return=False)
        evaluator = self.vm.time_evaluator("gpu_check_main", self.sync_device, number=1,
                                           repeat=repeat, min_repeat_ms=int(min_repeat_ms))
        return lambda: float(np.median(evaluator().results)) * 1e3


def load_placed(tvm, label: str, path: str, inputs: dict[str, np.ndarray], split: str
                ) -> Placed:
    """Load an exported tvm_hetero executable and put its inputs and weights on its devices."""
    from tvm.runtime.vm import VirtualMachine

    module = tvm.runtime.load_module(path)
    meta = json.loads(str(VirtualMachine(module, [tvm.cpu(0)])["hetero_meta"]()))
    devices = [tvm.device(d["device_type"], d["device_id"]) for d in meta["devices"]]
    vm = VirtualMachine(module, devices)
    weights = list(vm["hetero_weights"]()) if meta.get("num_weights") else []
    placed = meta.get("input_devices", [0] * len(meta["inputs"]))
    args = [tvm.runtime.tensor(np.ascontiguousarray(inputs[spec["name"]]), devices[dev])
            for spec, dev in zip(meta["inputs"], placed)]
    gpus = [dev for dev in devices if dev.dlpack_device_type() != tvm.cpu().dlpack_device_type()]
    return Placed(label, path, vm, args + weights, gpus[0] if gpus else devices[0], split)


def kernel_times(tvm, placed: Placed, runs: int = 3) -> dict[str, list[float]]:
    """Milliseconds of every kernel call of `placed`'s ``main`` (the GPU synchronised before
    and after each call: launch latency included), by kernel name, over `runs` runs."""
    device = placed.sync_device
    times: dict[str, list[float]] = {}
    started: list[float] = []

    def instrument(func, name, before_run, ret_value, *args):
        name = str(name)
        if name.startswith("vm.builtin") or name.startswith("hetero_"):
            return 0
        device.sync()
        if before_run:
            started.append(time.perf_counter())
        elif started:
            times.setdefault(name, []).append((time.perf_counter() - started.pop()) * 1e3)
        return 0

    placed.vm.set_instrument(instrument)
    try:
        for _ in range(runs):
            placed.vm["main"](*placed.args)
            device.sync()
    finally:
        placed.vm.set_instrument(lambda *_: 0)
    return {name: ms for name, ms in times.items()}


def slowest_classes(times: dict[str, list[float]], runs: int, top: int = 4) -> list[tuple]:
    """``(class, ms per inference, share, kernels)`` of the `top` kernel classes by time."""
    by_class: dict[str, list] = {}
    for name, ms in times.items():
        entry = by_class.setdefault(kernel_class(name), [0.0, set()])
        entry[0] += sum(ms) / runs
        entry[1].add(name)
    total = sum(ms for ms, _ in by_class.values()) or 1.0
    ranked = sorted(by_class.items(), key=lambda item: -item[1][0])[:top]
    return [(cls, ms, ms / total, len(names)) for cls, (ms, names) in ranked]


def fmt(value, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def run_bundle(bundle: str, *, rounds: int = 3, repeat: int = 5, min_repeat_ms: float = 40.0,
               tolerance: float = 1e-3, cpu_only: bool = False, anchor: bool = True,
               kernels: bool = True, budget_s: float = 240.0, models: list[str] | None = None,
               log: Callable[[str], None] = print) -> int:
    """Run every model of a bundle; print the table. Returns the exit code (0 all correct).

    With `cpu_only` no GPU is needed: the all-cpu libraries run and are checked, the CUDA
    ones are only loaded (when TVM's CUDA runtime loads), their kernels from the bundle only.
    """
    started = time.perf_counter()
    bundle = os.path.abspath(bundle)
    manifest = read_manifest(bundle)
    variant = pick_cpu_variant(manifest, cpu_flags())
    if not any(name in os.environ for name in ("TVM_NUM_THREADS", "OMP_NUM_THREADS")):
        os.environ["TVM_NUM_THREADS"] = str(len(os.sched_getaffinity(0)))
    tvm, cuda_missing = runtime_env.load_runtime(cuda=True)
    has_gpu = cuda_missing is None and bool(tvm.cuda(0).exist)
    if not cpu_only and not has_gpu:
        raise CheckError("no CUDA GPU here (" + (cuda_missing or "TVM's CUDA runtime sees no "
                         "device 0") + "); run on a machine with an NVIDIA GPU, or use --dry-run")
    store = KernelStore(os.path.join(bundle, manifest["kernels"]), manifest["arch"],
                        compile=not cpu_only)
    if cuda_missing is None:
        store.install()
    log(f"TVM {tvm.__version__} runtime only: {runtime_env.runtime_only(tvm)}; "
        f"CUDA runtime: {cuda_missing or 'loaded'}; "
        f"GPU: {tvm.cuda(0).device_name if has_gpu else 'none'}")
    log(f"CPU: {cpu_model()}, {len(os.sched_getaffinity(0))} CPUs, TVM threads "
        f"{os.environ.get('TVM_NUM_THREADS', '?')}; CPU build {variant} "
        f"({manifest['cpu_variants'][variant]['mcpu']})")
    torch_anchor = None
    if anchor and has_gpu:
        from . import anchor as anchor_mod

        try:
            torch_anchor = anchor_mod.TorchAnchor(repeat, min_repeat_ms)
            log(torch_anchor.describe())
        except Exception as err:  # no PyTorch with CUDA here: the table says n/a
            log(f"anchor: none (PyTorch with CUDA unavailable: {type(err).__name__}: {err})")

    rows, wrong = [], []
    for model in manifest["models"]:
        if models and model["name"] not in models:
            continue
        if time.perf_counter() - started > budget_s:
            log(f"{model['name']}: skipped, past the {budget_s:.0f} s budget")
            continue
        row = check_model(tvm, bundle, model, variant, has_gpu, store, torch_anchor,
                          rounds=rounds, repeat=repeat, min_repeat_ms=min_repeat_ms,
                          kernels=kernels and has_gpu, log=log)
        rows.append(row)
        if row["failed"] or not all(err is not None and err < tolerance
                                    for err in row["errors"].values()):
            wrong.append(model["name"])
    print_table(rows, tolerance, cpu_only, log)
    log(f"CUDA kernels: {store.hits} module(s) from the bundle, {store.compiled} compiled here "
        f"({store.compile_s:.1f} s)")
    log(f"gpu_check run took {time.perf_counter() - started:.0f} s")
    if wrong:
        raise CheckError(f"placements failed or outputs differ from onnxruntime beyond "
                         f"{tolerance:g}: {', '.join(wrong)}")
    return 0


def check_model(tvm, bundle: str, model: dict, variant: str, has_gpu: bool, store,
                torch_anchor, *, rounds: int, repeat: int, min_repeat_ms: float,
                kernels: bool, log) -> dict:
    """Load, check and time one model's placements (and its PyTorch anchor)."""
    start = time.perf_counter()
    name = model["name"]
    with np.load(os.path.join(bundle, model["inputs"])) as data:
        inputs = {key: data[key] for key in data.files}
    with np.load(os.path.join(bundle, model["reference"])) as data:
        reference = [data[f"out{i}"] for i in range(len(data.files))]
    row = {"model": name, "layers": model["layers"], "ms": {}, "errors": {}, "splits": {},
           "classes": None, "anchor_note": None, "failed": {}}
    placed = {}
    for label in PLACEMENTS:
        spec = model["placements"][label]
        path = os.path.join(bundle, spec["libs"].get(variant) or spec["libs"]["any"])
        row["splits"][label] = spec["split"]
        if spec.get("error"):  # found where the bundle was built
            row["failed"][label] = spec["error"]
            log(f"  {name} {label}: not run: {spec['error']}")
            continue
        if "cuda" in label and not has_gpu:
            if _cuda_loader_registered(tvm):  # loading compiles its CUDA module: the bundle's
                tvm.runtime.load_module(path)
                log(f"  {name} {label}: loaded (not run: no GPU)")
            continue
        lib_start = time.perf_counter()
        try:
            placed[label] = load_placed(tvm, label, path, inputs, spec["split"])
            row["errors"][label] = max_relative_error(placed[label].run(tvm), reference)
        except Exception as err:  # one placement failing is a row's note, not the end
            placed.pop(label, None)
            row["failed"][label] = error_line(err)
            log(f"  {name} {label}: failed: {row['failed'][label]}")
            continue
        log(f"  {name} {label}: loaded and run in {time.perf_counter() - lib_start:.1f} s, "
            f"max rel err vs onnxruntime {row['errors'][label]:.1e}")
    timers = {label: p.timer(repeat, min_repeat_ms) for label, p in placed.items()}
    if torch_anchor is not None:
        onnx_inputs = {key: inputs[key] for key in model["onnx_inputs"]}
        result = torch_anchor.prepare(os.path.join(bundle, model["onnx"]), onnx_inputs,
                                      reference)
        row["anchor_note"] = result.note
        for label, (timer, err) in result.entries.items():
            timers[label], row["errors"][label] = timer, err
    best = {label: float("inf") for label in timers}
    for _ in range(rounds):  # alternately: every entry once per round, best median
        for label, timer in timers.items():
            best[label] = min(best[label], timer())
    row["ms"] = best
    if kernels and "all-cuda" in placed:
        runs = 3
        times = kernel_times(tvm, placed["all-cuda"], runs)
        row["classes"] = slowest_classes(times, runs)
        row["kernel_sum_ms"] = sum(sum(ms) for ms in times.values()) / runs
    log(f"{name}: done in {time.perf_counter() - start:.1f} s: "
        + ", ".join(f"{label} {ms:.3f} ms" for label, ms in best.items()))
    return row


def _cuda_loader_registered(tvm) -> bool:
    return tvm.get_global_func("ffi.Module.load_from_bytes.cuda", allow_missing=True) is not None


COLUMNS = ("all-cpu", "all-cuda", "cpu+cuda", "torch eager", "torch graph")


def print_table(rows: list[dict], tolerance: float, cpu_only: bool, log) -> None:
    log("")
    log("| model | layers | " + " | ".join(f"{c} ms" for c in COLUMNS)
        + " | all-cuda / torch eager | cpu+cuda / faster single | cpu+cuda split "
          "| max rel err vs onnxruntime "
          "(cpu/cuda/split/eager/graph) | slowest all-cuda kernel classes (ms per run) |")
    log("| --- | ---: | " + " | ".join("---:" for _ in COLUMNS)
        + " | ---: | ---: | --- | --- | --- |")
    for row in rows:
        ms = row["ms"]
        ratio = (ms["all-cuda"] / ms["torch eager"]
                 if "all-cuda" in ms and ms.get("torch eager") else None)
        singles = [ms[c] for c in ("all-cpu", "all-cuda") if c in ms]
        split = (ms["cpu+cuda"] / min(singles)
                 if "cpu+cuda" in ms and len(singles) == 2 else None)
        errs = "/".join("-" if row["errors"].get(c) is None else f"{row['errors'][c]:.0e}"
                        for c in COLUMNS)
        classes = "; ".join(f"{cls} {t:.2f} ({share:.0%}, {n})"
                            for cls, t, share, n in row["classes"] or []) or "n/a"
        log(f"| {row['model']} | {row['layers']} | "
            + " | ".join(fmt(ms.get(c)) for c in COLUMNS)
            + f" | {fmt(ratio, 2)} | {fmt(split, 2)} | {row['splits']['cpu+cuda']} | {errs} "
              f"| {classes} |")
        for label, error in row["failed"].items():
            log(f"  {row['model']} {label}: failed: {error}")
        if row.get("anchor_note"):
            log(f"  {row['model']}: torch anchor: {row['anchor_note']}")
    log(f"(times: best median of the alternating rounds; errors: max |got - want| / max |want| "
        f"against onnxruntime's CPU provider, correct below {tolerance:g}; kernel classes: "
        f"time per inference, share of the kernels' time, distinct kernels"
        + ("; CPU only: the CUDA libraries loaded, not run)" if cpu_only else ")"))
