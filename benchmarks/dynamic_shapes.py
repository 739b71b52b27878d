"""One library for a shape range against static builds and onnxruntime.

For each model exported with dynamic axes (the real-model suite's cached exports:
``benchmarks/real_models.py`` writes them), build it once with its dynamic dimension kept
dynamic over a range, check it against onnxruntime at random shapes in the range, and time it
at a few shapes against the same model built static for each shape and against onnxruntime on
the dynamic file, alternated in one process (best of rounds). Prints a table and the CPU.

    python benchmarks/dynamic_shapes.py --exports out/real_models/exports \\
        --models bert_base gpt2_prefill gpt2_decode resnet50 --checks 10 --rounds 5

``gpt2_decode`` is one decode step over a KV cache whose length ``past`` is symbolic (its
attention mask is ``past+1`` long).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import time

import numpy as np

import tvm_hetero as th
from tvm_hetero import ShapeRange
from tvm_hetero.frontend.shape_ranges import dim_parts, dim_size
from tvm_hetero.measure.reference import outputs_match
from tvm_hetero.optimize.pass_ import ROW_CHUNKS

# model -> (the export's dynamic dimensions as given to the library (a name, or one another
# fixes: ``past+1``; those not named are pinned at 1), the range of the library's dimension,
# the sizes timed)
CASES = {
    "bert_base": ({"sequence": "sequence"}, ShapeRange(1, 512, 128), [16, 128, 384]),
    "gpt2_prefill": ({"sequence": "sequence"}, ShapeRange(1, 1024, 128), [16, 128, 384]),
    "resnet50": ({"batch": "batch"}, ShapeRange(1, 32, 8), [1, 8, 32]),
    # one decode step after `past` cached positions: the mask covers them and the new one
    "gpt2_decode": ({"past_sequence": "past", "total_sequence": "past+1"},
                    ShapeRange(1, 1023, 127), [128, 1000]),
}


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        model = [line.split(":", 1)[1].strip() for line in out.splitlines()
                 if line.startswith("Model name")]
        return f"{model[0] if model else platform.processor()}, {os.cpu_count()} CPUs"
    except OSError:
        return platform.processor()


def file_inputs(path: str) -> list[tuple[str, list, str]]:
    import onnx
    from onnx import helper

    model = onnx.load(path, load_external_data=False)
    init = {i.name for i in model.graph.initializer}
    out = []
    for value in model.graph.input:
        if value.name in init:
            continue
        tt = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in tt.shape.dim]
        out.append((value.name, dims, helper.tensor_dtype_to_np_dtype(tt.elem_type).name))
    return out


def inputs_at(specs, named: dict[str, str], size: int, seed: int):
    """Random inputs with the library's dimension at `size` (the export's dimensions it
    names at their sizes, the others at 1)."""
    rng = np.random.default_rng(seed)
    base = dim_parts(next(iter(named.values())))[0]
    out = {}
    for name, dims, dtype in specs:
        shape = [dim_size(named[d], {base: size}) if d in named
                 else (1 if isinstance(d, str) else d) for d in dims]
        if np.issubdtype(np.dtype(dtype), np.integer):
            out[name] = (np.ones(shape, dtype) if "mask" in name
                         else rng.integers(0, 1000, size=shape).astype(dtype))
        else:
            out[name] = rng.standard_normal(shape).astype(dtype)
    return out


def best_ms(fn, rounds: int, runs: int = 3) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, (time.perf_counter() - start) * 1e3)
    return best


def run_case(exports: str, name: str, exporter: str, checks: int, rounds: int,
             devices: th.DeviceSet) -> list[dict]:
    import onnxruntime as ort

    path = os.path.join(exports, f"{name}.{exporter}.onnx")
    named, shape_range, sizes = CASES[name]
    dynamic = dim_parts(next(iter(named.values())))[0]
    specs = file_inputs(path)
    input_shapes = {n: tuple(named.get(d, 1) if isinstance(d, str) else d for d in dims)
                    for n, dims, _ in specs}
    start = time.perf_counter()
    model = th.load_model(path, input_shapes=input_shapes,
                          shape_ranges={dynamic: shape_range})
    layers = th.extract_layers(model, th.PrepareConfig.for_devices(devices))
    compiled = th.build(model, th.Placement.all_on(layers, devices.names[0]), devices)
    dynamic_build_s = time.perf_counter() - start
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"],
                                   sess_options=_ort_options())
    rng = np.random.default_rng(0)
    span = shape_range.max - shape_range.min + 1
    check_sizes = sorted(int(s) + shape_range.min
                         for s in rng.choice(span, size=min(checks, span), replace=False))
    worst, right = 0.0, True
    for size in check_sizes:
        feed = inputs_at(specs, named, size, seed=size)
        ok, error = outputs_match(compiled.run(feed), session.run(None, feed))
        right, worst = right and ok, max(worst, error)
    # the same library under a seeded random placement over two devices, at three sizes
    two = th.DeviceSet.parse(["cpu", "cpu-generic"])
    chooser = np.random.default_rng(1)
    placed = th.build(model, th.Placement({layer.name: two.names[int(chooser.integers(2))]
                                           for layer in layers}), two)
    two_right = True
    for size in check_sizes[:: max(1, len(check_sizes) // 3)][:3]:
        feed = inputs_at(specs, named, size, seed=size + 1)
        ok, error = outputs_match(placed.run(feed), session.run(None, feed))
        two_right, worst = two_right and ok, max(worst, error)
    rows = []
    for size in sizes:
        static_start = time.perf_counter()
        static_model = th.load_model(path, input_shapes={
            n: tuple(dim_size(d, {dynamic: size}) if isinstance(d, str) else d for d in shape)
            for n, shape in input_shapes.items()})
        static_layers = th.extract_layers(static_model, th.PrepareConfig.for_devices(devices))
        static = th.build(static_model, th.Placement.all_on(static_layers, devices.names[0]),
                          devices)
        static_build_s = time.perf_counter() - static_start
        feed = inputs_at(specs, named, size, seed=size)
        vm_inputs = {s.name: feed[s.source_name or s.name] for s in compiled.inputs}
        timings = {"dynamic": [], "static": [], "onnxruntime": []}
        for _ in range(rounds):  # alternated: a slow spell falls on all three
            timings["dynamic"].append(best_ms(lambda: compiled.run(vm_inputs), 1))
            timings["static"].append(best_ms(lambda: static.run(vm_inputs), 1))
            timings["onnxruntime"].append(best_ms(lambda: session.run(None, feed), 1))
        best = {k: min(v) for k, v in timings.items()}
        rows.append({"model": name, "exporter": exporter, "dim": dynamic,
                     "range": str(shape_range), "size": size, "right": right,
                     "checked": len(check_sizes), "max_error": worst,
                     "dynamic_ms": best["dynamic"], "static_ms": best["static"],
                     "ort_ms": best["onnxruntime"],
                     "dynamic_build_s": dynamic_build_s, "static_build_s": static_build_s,
                     "unscheduled": sum(1 for r in compiled.stats.rules.values() if r is None),
                     "row_loops": sum(1 for r in compiled.stats.rules.values()
                                      if r is not None and r.startswith(ROW_CHUNKS)),
                     "kernels": len(compiled.stats.rules), "two_devices": two_right})
    return rows


def _ort_options():
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = os.cpu_count() or 1
    return options


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--exports", default="out/real_models/exports")
    parser.add_argument("--models", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--exporter", default="torchscript", choices=["torchscript", "dynamo"])
    parser.add_argument("--checks", type=int, default=10, help="random shapes checked")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    devices = th.DeviceSet.parse(["cpu"])
    print(f"CPU: {cpu_name()}; tvm_hetero all on cpu; onnxruntime on {os.cpu_count()} threads")
    print("| model | range | size | right (shapes checked, max error) | two devices "
          "| dynamic ms | static ms "
          "| onnxruntime ms | dynamic / static | dynamic / ort | build s dynamic / static "
          "| kernels unscheduled | row loops |")
    print("|---|---|---:|---|---|---:|---:|---:|---:|---:|---|---:|---:|")
    for name in args.models:
        try:
            rows = run_case(args.exports, name, args.exporter, args.checks, args.rounds,
                            devices)
        except th.HeteroError as err:
            print(f"| {name} | - | - | {err} | | | | | | | | | |")
            continue
        for r in rows:
            print(f"| {r['model']} ({r['dim']}) | {r['range']} | {r['size']} | "
                  f"{'yes' if r['right'] else 'NO'} ({r['checked']}, {r['max_error']:.1e}) | "
                  f"{'right' if r['two_devices'] else 'WRONG'} | "
                  f"{r['dynamic_ms']:.2f} | {r['static_ms']:.2f} | {r['ort_ms']:.2f} | "
                  f"{r['dynamic_ms'] / r['static_ms']:.2f} | "
                  f"{r['dynamic_ms'] / r['ort_ms']:.2f} | "
                  f"{r['dynamic_build_s']:.1f} / {r['static_build_s']:.1f} | "
                  f"{r['unscheduled']} of {r['kernels']} | {r['row_loops']} |", flush=True)


if __name__ == "__main__":
    main()
