"""Check tvm_hetero's CUDA path end to end on a machine with one NVIDIA GPU, in one command.

It probes `cpu` + `cuda`, profiles and tunes `zoo:resnet` over them, checks it and ResNet-50
against onnxruntime, and prints a table.

    python benchmarks/gpu_check.py [--models resnet,resnet50] [--trials 8] [--workdir DIR]
    python benchmarks/gpu_check.py --no-tune ""  # tune ResNet-50 too (well past 8 minutes)
    python benchmarks/gpu_check.py --dry-run     # no GPU needed: build and export only

Per model the table gives the all-`cpu`, all-`cuda` and third placement's latencies (re-timed
here alternately in one process, best median of `--rounds` rounds), the third placement's
layer split, the largest relative error of the three against onnxruntime (CPU provider), and
onnxruntime's own latency on its CPU and, where this onnxruntime has it, CUDA provider. The
third placement is the tuned best, or for the models in `--no-tune` every other layer on cuda.

ResNet-50 is not tuned by default: on one H200 (16 cores) every `cuda` build took 25-45 s
(NVRTC), zoo:resnet's profile and 8-candidate tune 200 s, and ResNet-50's three builds 95 s;
tuning ResNet-50 as well would take several minutes more.

Without a GPU it stops with one ``Error:`` line (exit 2). ``--dry-run`` builds the all-`cuda`
and the alternating placement of each model for ``cuda@ARCH`` (default sm_90) and exports them,
running nothing: a check of the CUDA build path on any machine.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time

import tvm_hetero as th
from tvm_hetero.testing import light_model, max_relative_error, onnx_reference

MODELS = ("resnet", "resnet50")


class CheckError(Exception):
    """A condition that ends the check with one error line."""


def gpu_present() -> bool:
    """Whether TVM's runtime has CUDA and sees GPU 0."""
    import tvm

    try:
        return bool(tvm.runtime.enabled("cuda")) and tvm.cuda(0).exist
    except Exception:  # no driver at all
        return False


def load(name: str) -> th.Model:
    if name in th.ZOO:
        return th.load_model(f"zoo:{name}")
    return th.load_model(light_model(name), name=name)


def split_text(placement: th.Placement, devices: th.DeviceSet) -> str:
    counts = {name: 0 for name in devices.names}
    for device in placement.assignment.values():
        counts[device] += 1
    return ", ".join(f"{name} {count}" for name, count in counts.items())


def onnxruntime_ms(onnx_model, inputs: dict, provider: str, rounds: int) -> float | None:
    """Median latency of onnxruntime with one execution provider (None when it lacks it)."""
    import onnxruntime as ort

    if provider not in ort.get_available_providers():
        return None
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(onnx_model.SerializeToString(), options,
                                   providers=[provider])
    if provider not in session.get_providers():
        return None
    summary = th.time_function(lambda: session.run(None, inputs), warmup=3,
                               repeat=10 * rounds)
    return summary.median


def dry_run(names: list[str], arch: str, workdir: str) -> None:
    """Build the all-cuda and a half-cuda placement of each model and export them."""
    devices = th.DeviceSet.parse(["cpu", f"cuda@{arch}"])
    cuda = devices.names[1]
    print(f"dry run: building for cpu + {cuda} ({arch}), running nothing")
    for name in names:
        model = load(name)
        layers = th.extract_layers(model)
        for label, placement in [("all-cuda", th.Placement.all_on(layers, cuda)),
                                 ("half-cuda", alternate_split(layers, cuda))]:
            start = time.perf_counter()
            compiled = th.build(model, placement, devices)
            path = compiled.export_library(os.path.join(workdir, f"{name}_{label}.so"))
            split = split_text(placement, devices)
            print(f"{name:<10} {label:<10} {len(layers):>3} layers ({split}): "
                  f"built and exported in {time.perf_counter() - start:.1f} s "
                  f"({os.path.getsize(path) / 2**20:.1f} MiB)")


def alternate_split(layers, gpu: str) -> th.Placement:
    """Every other layer on the GPU, the rest on the CPU: many copies each way."""
    return th.Placement({layer.name: gpu if index % 2 else "cpu"
                         for index, layer in enumerate(layers)})


def profile_and_tune(model, layers, devices: th.DeviceSet, args, model_dir: str,
                     row: dict) -> th.Placement:
    """Profile the layers on every device, tune the placement; returns the best one."""
    name = model.name
    os.makedirs(model_dir, exist_ok=True)
    start = time.perf_counter()  # tune reuses this profile (same path)
    profile = th.profile_model(model, layers, devices, os.path.join(model_dir, "profile.json"))
    sums = {dev: sum(profile.layer_ms[layer.name][dev] for layer in layers)
            for dev in devices.names}
    print(f"  {name}: profiled {len(layers)} layers in {time.perf_counter() - start:.0f} s; "
          + ", ".join(f"sum of layer ms on {dev} {ms:.3f}" for dev, ms in sums.items()),
          flush=True)
    start = time.perf_counter()
    result = th.tune(model, devices, trials=args.trials, workdir=model_dir, threshold=8,
                     batch_size=4, time_budget_s=args.tune_budget_s)
    row["tune_s"] = time.perf_counter() - start
    failed = [trial for trial in result.trials if not trial.result.ok]
    for trial in failed:
        print(f"  {name} candidate failed: {trial.source}: {trial.result.error.value} "
              f"{trial.result.message[:200]}")
    if result.placement is None:
        raise CheckError(f"{name}: no candidate ran correctly ({len(result.trials)} tried)")
    row["split"] = split_text(result.placement, devices)
    row["tune_ms"] = result.latency.median_ms
    print(f"  {name}: tuned {len(result.trials)} candidates ({len(failed)} failed) in "
          f"{row['tune_s']:.0f} s; best {row['tune_ms']:.3f} ms ({row['split']})", flush=True)
    return result.placement


def check_model(name: str, devices: th.DeviceSet, args, workdir: str) -> dict:
    """Tune one model over the devices; time and verify all-cpu, all-cuda and the best."""
    model = load(name)
    layers = th.extract_layers(model)
    inputs = model.random_inputs(seed=0)
    reference = onnx_reference(model.onnx_model, inputs, model)
    row: dict = {"model": name, "layers": len(layers), "tune_ms": None, "tune_s": None}
    if name in args.no_tune:
        best = alternate_split(layers, devices.names[1])
        row["split"] = split_text(best, devices) + " (every other layer, not tuned)"
    else:
        best = profile_and_tune(model, layers, devices, args, os.path.join(workdir, name), row)

    builds = {}
    errors = {}
    placements = {"cpu": th.Placement.all_on(layers, "cpu"),
                  "cuda": th.Placement.all_on(layers, devices.names[1]), "best": best}
    for label, placement in placements.items():
        same = [other for other in builds if placements[other] == placement]
        if same:  # the best is a single-device placement: time it once
            builds[label], errors[label] = builds[same[0]], errors[same[0]]
            continue
        start = time.perf_counter()
        compiled = th.build(model, placement, devices)
        errors[label] = max_relative_error(compiled.run(inputs), reference)
        builds[label] = compiled
        print(f"  {name}: {label} placement built in {time.perf_counter() - start:.0f} s, "
              f"max rel err vs onnxruntime {errors[label]:.1e}", flush=True)
    fastest = {label: float("inf") for label in builds}
    for _ in range(args.rounds):  # alternately, best median of the rounds
        for label, compiled in builds.items():
            fastest[label] = min(fastest[label], compiled.benchmark(inputs, repeat=10).median)
    row.update({f"{label}_ms": ms for label, ms in fastest.items()})
    row.update({f"{label}_err": err for label, err in errors.items()})
    row["max_err"] = max(errors.values())

    ort_inputs = {spec.source_name or spec.name: inputs[spec.name] for spec in model.inputs}
    row["ort_cpu_ms"] = onnxruntime_ms(model.onnx_model, ort_inputs, "CPUExecutionProvider",
                                       args.rounds)
    row["ort_cuda_ms"] = onnxruntime_ms(model.onnx_model, ort_inputs, "CUDAExecutionProvider",
                                        args.rounds)
    return row


def fmt(value, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


TABLE_HEAD = ("| model | layers | all-cpu ms | all-cuda ms | best ms | best split | tune ms | "
              "max rel err vs onnxruntime | ort cpu ms | ort cuda ms | tune s |\n"
              "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")


def table_line(row: dict) -> str:
    errs = "/".join(f"{row[k + '_err']:.1e}" for k in ("cpu", "cuda", "best"))
    return (f"| {row['model']} | {row['layers']} | {fmt(row['cpu_ms'])} | "
            f"{fmt(row['cuda_ms'])} | {fmt(row['best_ms'])} | {row['split']} | "
            f"{fmt(row['tune_ms'])} | {errs} | {fmt(row['ort_cpu_ms'])} | "
            f"{fmt(row['ort_cuda_ms'])} | {fmt(row['tune_s'], 0)} |")


def print_table(rows: list[dict], tolerance: float) -> None:
    print()
    print(TABLE_HEAD)
    for row in rows:
        print(table_line(row))
    print(f"(errors: all-cpu/all-cuda/best, max |got - want| / max |want|; "
          f"correct below {tolerance:g})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS),
                        help="comma-separated zoo or onnx-package light model names")
    parser.add_argument("--trials", type=int, default=8, help="tune trials per model")
    parser.add_argument("--tune-budget-s", type=float, default=120.0,
                        help="stop starting tune rounds after this many seconds per model")
    parser.add_argument("--no-tune", default="resnet50",
                        help="comma-separated models checked without profiling and tuning "
                             "(their third placement puts every other layer on cuda)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating timing rounds")
    parser.add_argument("--tolerance", type=float, default=1e-3,
                        help="largest relative error counted correct")
    parser.add_argument("--workdir", help="records, profiles, libraries (default: a temp dir)")
    parser.add_argument("--dry-run", action="store_true",
                        help="build and export the cuda placements only; no GPU needed")
    parser.add_argument("--arch", default="sm_90", help="the CUDA arch of --dry-run")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    names = [name.strip() for name in args.models.split(",") if name.strip()]
    args.no_tune = {name.strip() for name in args.no_tune.split(",") if name.strip()}
    started = time.perf_counter()
    workdir = args.workdir or tempfile.mkdtemp(prefix="tvm_hetero_gpu_check_")
    os.makedirs(workdir, exist_ok=True)
    try:
        if args.dry_run:
            dry_run(names, args.arch, workdir)
            return 0
        if not gpu_present():
            raise CheckError("no CUDA GPU here (TVM's CUDA runtime is absent or sees no "
                             "device 0); run on a machine with an NVIDIA GPU, or use --dry-run")
        devices = th.DeviceSet.parse(["cpu", "cuda"])
        print(f"devices: {', '.join(f'{d.name} {d.target}' for d in devices)}")
        for status in th.probe(devices):
            print(f"  {status.name:<6} {status.gflops:9.1f} GFLOP/s "
                  f"{status.memory_bytes / 2**30:7.1f} GiB {status.bandwidth_gbs:7.2f} GB/s "
                  f"score {status.score:.2f}")
        rows = []
        for name in names:
            start = time.perf_counter()
            rows.append(check_model(name, devices, args, workdir))
            print(f"{name}: done in {time.perf_counter() - start:.0f} s\n{table_line(rows[-1])}",
                  flush=True)
        print_table(rows, args.tolerance)
        print(f"gpu_check took {time.perf_counter() - started:.0f} s")
        wrong = [row["model"] for row in rows if not row["max_err"] < args.tolerance]
        if wrong:
            raise CheckError(f"outputs differ from onnxruntime beyond {args.tolerance:g}: "
                             f"{', '.join(wrong)}")
    except (CheckError, th.HeteroError) as err:
        print(f"Error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
