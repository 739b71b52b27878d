"""Whole real models as torch exports them, at their real sizes, through tvm_hetero against
onnxruntime and OpenVINO on the CPU.

    python benchmarks/real_models.py [--models a,b] [--exporters torchscript,dynamo]
                                     [--rounds 3] [--repeat 5] [--skip-openvino]
                                     [--skip-two-device] [--skip-done] [--print-only]
                                     [--out out/real_models] [--list]

Each model (``benchmarks/real_models_export.py``: torchvision classifiers at 224x224, DeepLabV3,
two detectors' backbones and heads, BERT-base, GPT-2 prefill and one decode step, T5 and
Whisper encoders, ViT-B, an LSTM; seeded random weights, nothing downloaded) is exported by
each exporter in a subprocess, once: the files stay under ``OUT/exports/`` and are re-exported
only when missing. Then, in this process, for each export: ``th.load_model`` with the dynamic
axes pinned to the seeded inputs' shapes, ``th.build`` all on ``cpu``, the outputs against
onnxruntime running the graph as written (``verify.reference_session``), a seeded random
placement over ``cpu`` and ``cpu-generic`` built and checked the same way, then rounds
alternating tvm_hetero, onnxruntime (2 intra-op threads, its default graph optimizations) and
OpenVINO (CPU, f32 inference precision, 2 threads, latency hint; its model reshaped to the same
static shapes), the best median of each (``testing.suite.alternating_best``). Where
``CompiledModel.profile`` exists, the slowest kernel of the all-``cpu`` build with its rule and
GFLOP/s.

Prints the CPU (model name, AVX-512 or AVX2, TVM's target CPU) and one row per export: whether
it imported, built and is right (max error within 1e-4 of the largest output), the build
seconds (``!`` past 2 minutes), the max error, the three latencies, tvm_hetero over
onnxruntime and over the faster of the two, the two-device check (right / wrong / error), the
slowest kernel; then the geometric mean and worst of the ratio to onnxruntime, and each
failure's one-line error. An export the exporter cannot write is "not exportable", not a
failure of ours. Every row also goes to ``OUT/results.json`` as soon as it is measured (rows of
exports not in this run are kept); a row whose process died says during what.

``--skip-done`` skips exports that already have a finished row in results.json;
``--print-only`` prints the table of results.json and measures nothing.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from real_models_export import EXPORTERS, MODELS  # noqa: E402  (torch only in the subprocess)

TOLERANCE = 1e-4  # max |ours - ort| / max |ort| over the outputs
BUILD_LIMIT_S = 120.0
THREADS = 2
OV_CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": THREADS,
             "PERFORMANCE_HINT": "LATENCY"}
TWO_DEVICES = ["cpu", "cpu-generic"]
EXPORT_TIMEOUT_S = 1800


def one_line(err: BaseException) -> str:
    from tvm_hetero.errors import error_message

    return error_message(err).splitlines()[0][:300] if str(err) else type(err).__name__


def cpu_text() -> str:
    """The CPU's name, its widest vector extension and TVM's target CPU."""
    from tvm_hetero.devices import host_cpu_name
    from tvm_hetero.testing.suite import cpu_name

    with open("/proc/cpuinfo") as handle:
        flags = next((line for line in handle if line.startswith("flags")), "").split()
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{cpu_name()}, {vector}, {os.cpu_count()} CPUs, TVM target mcpu {host_cpu_name()}"


def ensure_export(name: str, exporter: str, exports: str) -> dict:
    """The export's record, exporting it in a subprocess (niced) where it is missing."""
    record_path = os.path.join(exports, f"{name}.{exporter}.json")
    if os.path.exists(record_path):
        with open(record_path) as handle:
            record = json.load(handle)
        if record["status"] != "ok" or os.path.exists(os.path.join(exports, record["path"])):
            return record
    command = ["nice", "-n", "10", sys.executable, os.path.join(HERE, "real_models_export.py"),
               "--model", name, "--exporter", exporter, "--out", exports]
    print(f"exporting {name} ({exporter}) ...", flush=True)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return dict(model=name, exporter=exporter, status="export failed",
                    error=f"export timed out after {EXPORT_TIMEOUT_S} s")
    if not os.path.exists(record_path):  # the exporting process died
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return dict(model=name, exporter=exporter, status="export failed",
                    error=f"export exited {done.returncode}: {tail[:300]}")
    with open(record_path) as handle:
        return json.load(handle)


class OpenVINO:
    """An OpenVINO CPU model compiled for static input shapes, with ``benchmark`` and
    ``run`` as ``alternating_best`` and the checks call them."""

    def __init__(self, path: str, feed: dict):
        import openvino as ov

        core = ov.Core()
        model = core.read_model(path)
        model.reshape({name: list(value.shape) for name, value in feed.items()})
        self.compiled = core.compile_model(model, "CPU", OV_CONFIG)
        self.request = self.compiled.create_infer_request()
        self.feed = feed

    def run(self) -> list[np.ndarray]:
        results = self.request.infer(self.feed)
        return [np.array(results[out]) for out in self.compiled.outputs]

    def benchmark(self, _inputs=None, repeat: int = 5):
        import tvm_hetero as th

        return th.time_function(
            lambda: self.request.infer(self.feed, share_inputs=True, share_outputs=True),
            repeat=repeat)


def slowest_kernels(compiled, inputs, top: int = 5) -> list[dict] | None:
    """The `top` slowest kernel rows of ``compiled.profile`` (None where it does not exist)."""
    if not hasattr(compiled, "profile"):
        return None
    profile = compiled.profile(inputs, repeat=5)
    rows = [row for row in profile.by_time() if row.kind == "kernel"][:top]
    return [dict(kernel=row.name, layer=row.layer, rule=row.rule, ms=row.time_ms,
                 share=row.share, gflops=row.gflops, gbps=row.gbps) for row in rows]


class Results:
    """results.json: rows by (model, exporter), rewritten after every change."""

    def __init__(self, path: str):
        self.path = path
        self.data = {"rows": []}
        if os.path.exists(path):
            with open(path) as handle:
                self.data = json.load(handle)

    def row(self, model: str, exporter: str) -> dict | None:
        return next((r for r in self.data["rows"]
                     if r["model"] == model and r["exporter"] == exporter), None)

    def save(self, row: dict, **header) -> None:
        rows = [r for r in self.data["rows"]
                if (r["model"], r["exporter"]) != (row["model"], row["exporter"])]
        order = {key: i for i, key in enumerate((m, e) for m in MODELS for e in EXPORTERS)}
        rows.append(row)
        rows.sort(key=lambda r: order.get((r["model"], r["exporter"]), len(order)))
        self.data.update(header, rows=rows)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as handle:
            json.dump(self.data, handle, indent=1)
        os.replace(tmp, self.path)


def measure(name: str, exporter: str, args, results: Results, header: dict) -> dict:
    """One export through every step; each step's failure is the row's error."""
    import onnx

    import tvm_hetero as th
    from tvm_hetero.measure.reference import reference_session
    from tvm_hetero.testing import max_relative_error, random_placement
    from tvm_hetero.testing.suite import alternating_best, ort_cpu_session

    exports = os.path.join(args.out, "exports")
    row = dict(model=name, exporter=exporter, imported=False, built=False, right=False)
    record = ensure_export(name, exporter, exports)
    row["export"] = record["status"]
    if record["status"] != "ok":
        row["error"] = record["error"]
        row["finished"] = True
        return row

    def stage(what):  # saved first: if the process dies, the row says where
        row["error"] = f"process died during {what}"
        results.save(dict(row, finished=False), **header)

    path = os.path.join(exports, record["path"])
    with np.load(os.path.join(exports, f"{name}.inputs.npz")) as arrays:
        feed = {key: arrays[key] for key in record["inputs"]}
    stage("onnxruntime")
    try:
        proto = onnx.load(path)
        want = reference_session(proto).run(None, feed)
        session = ort_cpu_session(proto, THREADS)
        del proto
    except Exception as err:  # no reference: nothing to compare with
        row.update(error=f"onnxruntime: {one_line(err)}", finished=True)
        return row
    stage("import")
    try:
        start = time.perf_counter()
        model = th.load_model(path, name=name,
                              input_shapes={k: tuple(v.shape) for k, v in feed.items()})
        row["import_s"] = time.perf_counter() - start
        row["imported"] = True
        inputs = {spec.name: feed[spec.source_name or spec.name] for spec in model.inputs}
        stage("build")
        start = time.perf_counter()
        compiled = th.build(model, "all:cpu", th.DeviceSet.parse(["cpu"]))
        row["build_s"] = time.perf_counter() - start
        row["built"] = True
        stage("run")
        row["max_error"] = max_relative_error(compiled.run(inputs), want)
        row["right"] = row["max_error"] <= TOLERANCE
    except Exception as err:  # a row with the error; the run goes on
        row["error"] = one_line(err)
        row["finished"] = True
        return row
    row["error"] = None
    builds = {"tvm": compiled}
    if not args.skip_openvino:
        stage("openvino")
        try:
            builds["openvino"] = OpenVINO(path, feed)
            row["openvino_error"] = max_relative_error(builds["openvino"].run(), want)
        except Exception as err:
            row["openvino_failure"] = one_line(err)
    stage("timing")
    best = alternating_best(session, feed, builds, inputs, args.rounds, args.repeat)
    row.update(tvm_ms=best["tvm"], ort_ms=best["ort"], openvino_ms=best.get("openvino"))
    row["vs_ort"] = best["tvm"] / best["ort"]
    row["vs_best"] = best["tvm"] / min(v for k, v in best.items() if k != "tvm")
    builds.pop("openvino", None)
    gc.collect()
    stage("profile")
    try:
        row["slowest"] = slowest_kernels(compiled, inputs)
    except Exception as err:
        row["profile_failure"] = one_line(err)
    del builds, compiled, session
    gc.collect()
    if not args.skip_two_device:
        stage("two-device check")
        try:
            devices = th.DeviceSet.parse(TWO_DEVICES)
            layers = th.extract_layers(model, th.PrepareConfig.for_devices(devices))
            placement = random_placement(layers, devices.names, np.random.default_rng(0))
            start = time.perf_counter()
            split = th.build(model, placement, devices)
            row["two_device_build_s"] = time.perf_counter() - start
            row["two_device_error"] = max_relative_error(split.run(inputs), want)
            row["two_device"] = "right" if row["two_device_error"] <= TOLERANCE else "wrong"
            del split
        except Exception as err:
            row["two_device"] = "error"
            row["two_device_failure"] = one_line(err)
    row["error"] = None
    row["finished"] = True
    return row


# -- the table ---------------------------------------------------------------------------------

def _ms(value) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}"


def table(rows: list[dict]) -> str:
    """The fixed-width table, the ratio summary and the failures' error lines."""
    head = ["model", "exporter", "imp/built/right", "build s", "max err", "tvm ms", "ort ms",
            "ov ms", "/ort", "/best", "2-device", "slowest kernel (rule, GFLOP/s)"]
    lines = [head]
    notes = []
    profiled = False
    for r in rows:
        if r.get("export") not in (None, "ok"):
            status = r["export"]
            notes.append(f"{r['model']} {r['exporter']}: {r['export']}: {r.get('error')}")
        else:
            status = "/".join("yes" if r.get(k) else "no" for k in ("imported", "built", "right"))
            if r.get("error"):
                notes.append(f"{r['model']} {r['exporter']}: {r['error']}")
        for key in ("openvino_failure", "two_device_failure", "profile_failure"):
            if r.get(key):
                notes.append(f"{r['model']} {r['exporter']} {key.split('_failure')[0]}: "
                             f"{r[key]}")
        build = r.get("build_s")
        build_text = "-" if build is None else f"{build:.1f}" + ("!" if build > BUILD_LIMIT_S
                                                                else "")
        error = r.get("max_error")
        slowest = "-"
        if r.get("slowest"):
            profiled = True
            k = r["slowest"][0]
            rate = f"{k['gflops']:.1f}" if k.get("gflops") else \
                f"{k['gbps']:.1f} GB/s" if k.get("gbps") else "-"
            slowest = f"{k['layer']} {k['ms']:.2f} ms ({k['rule']}, {rate})"
        lines.append([r["model"], r["exporter"], status, build_text,
                      "-" if error is None else f"{error:.1e}", _ms(r.get("tvm_ms")),
                      _ms(r.get("ort_ms")), _ms(r.get("openvino_ms")),
                      _ms(r.get("vs_ort")), _ms(r.get("vs_best")), r.get("two_device", "-"),
                      slowest])
    if not profiled:  # the column left out
        for line in lines:
            line.pop()
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    text = ["  ".join(c.ljust(w) if i in (0, 1, 2, 10, 11) else c.rjust(w)
                      for i, (c, w) in enumerate(zip(line, widths))).rstrip()
            for line in lines]
    ratios = {f"{r['model']} {r['exporter']}": r["vs_ort"] for r in rows if r.get("vs_ort")}
    if ratios:
        geomean = math.exp(sum(math.log(v) for v in ratios.values()) / len(ratios))
        worst = max(ratios, key=ratios.get)
        text.append(f"tvm_hetero / onnxruntime: geometric mean {geomean:.2f} over "
                    f"{len(ratios)} exports; worst {worst} {ratios[worst]:.2f}")
    if not profiled:
        text.append("slowest kernel: CompiledModel.profile is not in this tvm_hetero")
    if notes:
        text.append("failures:")
        text += [f"  {note}" for note in notes]
    return "\n".join(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--exporters", default=",".join(EXPORTERS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip-openvino", action="store_true")
    parser.add_argument("--skip-two-device", action="store_true")
    parser.add_argument("--skip-done", action="store_true",
                        help="skip exports with a finished row in results.json")
    parser.add_argument("--print-only", action="store_true")
    parser.add_argument("--out", default=os.path.join("out", "real_models"))
    parser.add_argument("--list", action="store_true", help="print the model names and exit")
    args = parser.parse_args()
    if args.list:
        print("\n".join(MODELS))
        return
    models = [m for m in args.models.split(",") if m]
    exporters = [e for e in args.exporters.split(",") if e]
    unknown = sorted(set(models) - set(MODELS)) + sorted(set(exporters) - set(EXPORTERS))
    if unknown:
        parser.error(f"unknown model or exporter: {', '.join(unknown)}")
    os.makedirs(os.path.join(args.out, "exports"), exist_ok=True)
    results = Results(os.path.join(args.out, "results.json"))
    if args.print_only:
        print(results.data.get("cpu", ""))
        print(table(results.data["rows"]))
        return

    import tvm_hetero as th  # noqa: F401  (TVM's threads set on first use)
    header = dict(cpu=cpu_text(), rounds=args.rounds, repeat=args.repeat, threads=THREADS)
    print(header["cpu"], flush=True)
    done = []
    for name in models:
        for exporter in exporters:
            old = results.row(name, exporter)
            if args.skip_done and old and old.get("finished"):
                done.append(old)
                continue
            start = time.perf_counter()
            row = measure(name, exporter, args, results, header)
            row["seconds"] = time.perf_counter() - start
            results.save(row, **header)
            done.append(row)
            print(table([row]).splitlines()[1], flush=True)
            gc.collect()
    print()
    print(header["cpu"])
    print(table(done))


if __name__ == "__main__":
    main()
