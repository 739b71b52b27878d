"""Bad inputs through the command line, one case each.

Every case runs `tvm-hetero ...` in-process and checks what a user would see: exit status 2,
exactly one line on stderr and it starts with ``Error: `` (native TVM output on fd 2 and log
records of level WARNING or above count as stderr lines, as they do in a real process), no
traceback, nothing on stdout, and nothing written: the working directory holds the same files
with the same contents before and after (no partial library, no partial outputs, no file created
by a pickle that should never have been loaded).

Every case is registered in :data:`CASES`; ``len(CASES)`` is the number of bad inputs tried.
Cases that expose a bug are marked ``xfail(strict=True)`` with the cause: fixing the bug makes
them pass, and the strict marker then asks for the marker to be removed.
"""

from __future__ import annotations

import builtins
import gc
import hashlib
import json
import logging
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tvm_hetero as th
from tvm_hetero.cli.main import main

from tests.helpers.models import zoo

DEVICES = ["cpu", "cpu-generic"]


@dataclass(frozen=True)
class Case:
    name: str
    setup: Callable  # (workdir: Path, shared: Shared) -> argv (list of str)
    expect: tuple[str, ...]  # substrings of the one error line


CASES: list = []  # every bad input tried, as pytest params (len(CASES) = number of cases)


def bad_input(name: str, *expect: str, xfail: str | None = None):
    """Register a case: `setup(workdir, shared)` writes the bad input and returns the argv."""

    def register(setup):
        marks = [pytest.mark.xfail(strict=True, reason=xfail)] if xfail else []
        CASES.append(pytest.param(Case(name, setup, expect), id=name, marks=marks))
        return setup

    return register


# ----------------------------------------------------------------------------------------------
# shared artifacts (made once per session, outside the directory a case is checked in)


class Shared:
    def __init__(self, root: Path):
        self.root = root
        self._lib = None
        self._record = None

    def mlp_library(self) -> str:
        """zoo:mlp built all on cpu, exported."""
        if self._lib is None:
            path = self.root / "mlp.so"
            assert main(["compile", "zoo:mlp", "-d", "cpu", "-p", "all:cpu", "-o",
                         str(path)]) == 0
            self._lib = str(path)
        return self._lib

    def record_line(self) -> dict:
        """One real, verified record of zoo:mlp on cpu + cpu-generic (as JSON)."""
        if self._record is None:
            from tvm_hetero.search.records import PlacementRecords
            from tvm_hetero.measure import ErrorKind, MeasureResult

            model = zoo("mlp")
            path = self.root / "records.jsonl"
            db = PlacementRecords(path, model.fingerprint(),
                                  th.DeviceSet.parse(DEVICES).fingerprint())
            db.commit(th.Placement.all_on(th.extract_layers(model), "cpu-generic"),
                      MeasureResult(ErrorKind.NONE, [1.0, 1.1, 0.9]))
            self._record = json.loads(path.read_text().splitlines()[0])
        return json.loads(json.dumps(self._record))


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    return Shared(tmp_path_factory.mktemp("shared"))


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            if p.is_file() else "dir" for p in sorted(root.rglob("*"))}


def _cnn_bytes() -> bytes:
    return zoo("cnn").onnx_model.SerializeToString()


def _one_op_model(op: str) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [])
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "one_op", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _dynamic_cnn() -> onnx.ModelProto:
    model = onnx.ModelProto.FromString(_cnn_bytes())
    dim = model.graph.input[0].type.tensor_type.shape.dim[0]
    dim.ClearField("dim_value")
    dim.dim_param = "batch"
    return model


def _compile(model: str, placement: str, out: str, *extra: str) -> list[str]:
    return ["compile", model, *[a for d in DEVICES for a in ("-d", d)], "-p", placement,
            "-o", out, *extra]


def _compile_records(records: Path, out: Path, devices=DEVICES) -> list[str]:
    return ["compile", "zoo:mlp", *[a for d in devices for a in ("-d", d)], "--records",
            str(records), "-o", str(out)]


class _Evil:
    """Unpickling this creates a file: a pickle that is ever loaded shows in the snapshot."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (builtins.open, (self.marker, "w"))


def _mlp_inputs() -> dict[str, np.ndarray]:
    return zoo("mlp").random_inputs(seed=0)


def _run_with_inputs(d: Path, s: Shared, name: str) -> list[str]:
    return ["run", s.mlp_library(), "--inputs", str(d / name), "--output", str(d / "out.npz"),
            "--repeat", "1"]


# ----------------------------------------------------------------------------------------------
# ONNX models


@bad_input("onnx-malformed", "not a valid ONNX model")
def _(d, s):
    (d / "m.onnx").write_bytes(b"hello, this is not a protobuf\n")
    return _compile(str(d / "m.onnx"), "all:cpu", str(d / "m.so"))


@bad_input("onnx-truncated", "not a valid ONNX model")
def _(d, s):
    data = _cnn_bytes()
    (d / "m.onnx").write_bytes(data[:len(data) // 2])
    return _compile(str(d / "m.onnx"), "all:cpu", str(d / "m.so"))


@bad_input("onnx-empty-file", "not a valid ONNX model")
def _(d, s):
    (d / "m.onnx").write_bytes(b"")
    return ["inspect", str(d / "m.onnx")]


@bad_input("onnx-no-nodes", "has no nodes")
def _(d, s):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    model = helper.make_model(helper.make_graph([], "empty", [x], [x]),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, d / "m.onnx")
    return ["inspect", str(d / "m.onnx")]


@bad_input("onnx-path-is-directory", "is a directory")
def _(d, s):
    (d / "m.onnx").mkdir()
    return ["inspect", str(d / "m.onnx")]


@bad_input("onnx-unsupported-op", "not supported", "Det")
def _(d, s):
    onnx.save(_one_op_model("Det"), d / "det.onnx")  # valid ONNX, no TVM converter
    return _compile(str(d / "det.onnx"), "all:cpu", str(d / "det.so"))


@bad_input("onnx-unknown-op", "NoSuchOp")
def _(d, s):
    onnx.save(_one_op_model("NoSuchOp"), d / "m.onnx")
    return ["inspect", str(d / "m.onnx")]


@bad_input("onnx-dynamic-shape", "dynamic shape", "--input-shape input=")
def _(d, s):
    onnx.save(_dynamic_cnn(), d / "dyn.onnx")
    return _compile(str(d / "dyn.onnx"), "all:cpu", str(d / "dyn.so"))


def _inspect_dynamic_cnn(d, *flags):
    onnx.save(_dynamic_cnn(), d / "dyn.onnx")
    return ["inspect", str(d / "dyn.onnx"), *flags]


@bad_input("input-shape-syntax", "invalid --input-shape")
def _(d, s):
    return _inspect_dynamic_cnn(d, "--input-shape", "input=1,3.5,32,32")


@bad_input("named-dimension-without-range", "--shape-range x=MIN:MAX")
def _(d, s):
    return _inspect_dynamic_cnn(d, "--input-shape", "input=1,x,32,32")


@bad_input("shape-range-syntax", "bad shape range 'batch=9:1'")
def _(d, s):
    return _inspect_dynamic_cnn(d, "--shape-range", "batch=9:1")


@bad_input("shape-range-unused", "shape range given for seq")
def _(d, s):
    return _inspect_dynamic_cnn(d, "--shape-range", "batch=1:4", "--shape-range", "seq=1:8")


@bad_input("input-shape-zero-dim", "invalid --input-shape")
def _(d, s):
    onnx.save(_dynamic_cnn(), d / "dyn.onnx")
    return ["inspect", str(d / "dyn.onnx"), "--input-shape", "input=0,3,32,32"]


@bad_input("input-shape-unknown-input", "unknown input(s) nope")
def _(d, s):
    return ["inspect", "zoo:mlp", "--input-shape", "nope=1,2"]




@bad_input("input-shape-wrong-rank", "cannot import")
def _(d, s):
    onnx.save(_dynamic_cnn(), d / "dyn.onnx")
    return _compile(str(d / "dyn.onnx"), "all:cpu", str(d / "dyn.so"), "--input-shape",
                    "input=1,3")


@bad_input("input-shape-incompatible", "cannot import")
def _(d, s):
    onnx.save(_dynamic_cnn(), d / "dyn.onnx")  # 16x16 images do not fit the dense layer
    return _compile(str(d / "dyn.onnx"), "all:cpu", str(d / "dyn.so"), "--input-shape",
                    "input=1,3,16,16")


@bad_input("zoo-unknown-model", "unknown zoo model 'nope'")
def _(d, s):
    return _compile("zoo:nope", "all:cpu", str(d / "m.so"))


# ----------------------------------------------------------------------------------------------
# devices


# (case, devices given, placement, expected): zoo:mlp compiled with one -d per device
DEVICE_CASES = [
    ("device-unknown", ["tpu"], "all:tpu", ["unknown device 'tpu'"]),
    ("device-bad-index", ["cpu:x"], "all:cpu", ["unknown device 'cpu:x'"]),
    ("device-arch-on-cpu", ["cpu@sm_80"], "all:cpu", ["only cuda takes an @arch"]),
    ("device-bad-name", ["my dev=cpu"], "all:cpu", ["invalid device name 'my dev'"]),
    ("device-repeated", ["cpu", "cpu"], "all:cpu", ["device names must be unique"]),
    ("device-json-malformed", ['{"kind": llvm'], "all:cpu", ["is not valid JSON"]),
    ("device-json-unknown-kind", ['x={"kind": "nosuchkind"}'], "all:x",
     ["unknown target kind 'nosuchkind'"]),
    ("device-json-unknown-option", ['x={"kind": "llvm", "bogus_option": 1}'], "all:x",
     ["invalid TVM target", "bogus_option"]),
    ("device-json-unknown-mcpu", ['x={"kind": "llvm", "mcpu": "nosuchcpu"}'], "all:x",
     ["nosuchcpu"]),
]
for _name, _devices, _placement, _expect in DEVICE_CASES:
    bad_input(_name, *_expect)(
        lambda d, s, devices=_devices, placement=_placement: [
            "compile", "zoo:mlp", *[a for dev in devices for a in ("-d", dev)], "-p", placement,
            "-o", str(d / "m.so")])


@bad_input("cuda-run-without-gpu", "contains cuda code", "no driver or GPU")
def _(d, s):
    import tvm

    if tvm.runtime.enabled("cuda") and tvm.cuda(0).exist:
        pytest.skip("a GPU is present: a CUDA library runs here")
    lib = s.root / "mlp_cuda.so"
    if not lib.exists():  # compiling for CUDA works without a GPU (given the architecture)
        assert main(["compile", "zoo:mlp", "-d", "cpu", "-d", "cuda@sm_90", "-p", "all:cuda",
                     "-o", str(lib)]) == 0
    return ["run", str(lib), "-d", "cpu", "-d", "cuda@sm_90", "--output", str(d / "out.npz")]


# ----------------------------------------------------------------------------------------------
# memory sizes


# (case, --memory, expected)
MEMORY_CASES = [
    ("memory-unknown-unit", "cpu=12XB", "invalid memory size '12XB'"),
    ("memory-negative", "cpu=-5MiB", "invalid memory size '-5MiB'"),
    ("memory-no-size", "cpu=", "invalid --memory 'cpu='"),
    ("memory-unknown-device", "gpu=1GiB", "memory cap for unknown device(s): gpu"),
]
for _name, _memory, _expect in MEMORY_CASES:
    bad_input(_name, _expect)(lambda d, s, memory=_memory: _compile(
        "zoo:mlp", "all:cpu", str(d / "m.so"), "--memory", memory))


@bad_input("memory-devices-command", "invalid memory size '1.5.5GB'")
def _(d, s):
    return ["devices", "-d", "cpu", "--memory", "cpu=1.5.5GB"]


# ----------------------------------------------------------------------------------------------
# placement files


# (case, the placement file's text, expected)
PLACEMENT_FILES = [
    ("placement-malformed-json", '{"placement": {"matmul_0": "cpu",', "not valid JSON"),
    ("placement-empty-file", "", "not valid JSON"),
    ("placement-empty-object", "{}", "the placement is empty"),
    ("placement-empty-placement", json.dumps({"format": "tvm_hetero.placement", "version": 1,
                                              "placement": {}}), "the placement is empty"),
    ("placement-not-an-object", '["matmul_0", "cpu"]', "expected a JSON object"),
    ("placement-non-string-device", json.dumps({"placement": {"matmul_0": 0}}),
     "must map layer names to device names"),
    ("placement-newer-version", json.dumps({"format": "tvm_hetero.placement", "version": 99,
                                            "placement": {"matmul_0": "cpu"}}),
     "newer than this tvm_hetero reads"),
    ("placement-missing-layers", json.dumps({"matmul_0": "cpu"}), "missing 2 layer(s)"),
]


def _placement_file(text: str):
    """A case's setup: compile zoo:mlp with a placement file holding `text`."""

    def setup(d, s):
        (d / "p.json").write_text(text)
        return _compile("zoo:mlp", str(d / "p.json"), str(d / "m.so"))

    return setup


for _name, _text, _expect in PLACEMENT_FILES:
    bad_input(_name, _expect)(_placement_file(_text))


@bad_input("placement-other-format", "format is 'tvm_hetero.record'")
def _(d, s):
    (d / "p.json").write_text(json.dumps(s.record_line()))  # a record, not a placement
    return _compile("zoo:mlp", str(d / "p.json"), str(d / "m.so"))


@bad_input("placement-other-model", "unknown layer(s): conv2d_0")
def _(d, s):
    cnn_layers = th.extract_layers(zoo("cnn"))
    th.Placement.all_on(cnn_layers, "cpu", model="cnn").save(d / "p.json", DEVICES)
    return _compile("zoo:mlp", str(d / "p.json"), str(d / "m.so"))


@bad_input("placement-unknown-device", "unknown device(s): tpu")
def _(d, s):
    return _compile("zoo:mlp", "all:tpu", str(d / "m.so"))


@bad_input("placement-all-without-device", "`all:` needs a device name")
def _(d, s):
    return _compile("zoo:mlp", "all:", str(d / "m.so"))


@bad_input("placement-file-missing", "placement file not found")
def _(d, s):
    return _compile("zoo:mlp", str(d / "none.json"), str(d / "m.so"))


# ----------------------------------------------------------------------------------------------
# records files (compile --records)


# (case, the records file's contents, expected); before 32e235f the first two were internal
# errors: AttributeError on `data.get` of a list/str
RECORDS_FILES = [
    ("records-non-object-line", "[1, 2, 3]\n", ["no usable record"]),
    ("records-string-line", '"hello"\n', ["no usable record"]),
    ("records-not-json", "this is\nnot a records\nfile\n", ["no usable record"]),
    ("records-binary-file", bytes(range(256)) * 4, ["cannot read records file"]),
    ("records-empty-file", "", ["no usable record", "holds no readable record"]),
]


def _records_file(contents: str | bytes):
    """A case's setup: compile zoo:mlp with --records of a file holding `contents`."""

    def setup(d, s):
        if isinstance(contents, bytes):
            (d / "r.jsonl").write_bytes(contents)
        else:
            (d / "r.jsonl").write_text(contents)
        return _compile_records(d / "r.jsonl", d / "m.so")

    return setup


for _name, _contents, _expect in RECORDS_FILES:
    bad_input(_name, *_expect)(_records_file(_contents))


@bad_input("records-truncated-line", "no usable record")
def _(d, s):
    line = json.dumps(s.record_line())
    (d / "r.jsonl").write_text(line[:len(line) // 2])
    return _compile_records(d / "r.jsonl", d / "m.so")


@bad_input("records-bad-result", "no usable record")
def _(d, s):
    record = s.record_line()
    record["result"]["latencies_ms"] = "fast"
    (d / "r.jsonl").write_text(json.dumps(record) + "\n")
    return _compile_records(d / "r.jsonl", d / "m.so")


@bad_input("records-other-model", "no usable record", "another model")
def _(d, s):
    record = s.record_line()
    record["model"] = zoo("cnn").fingerprint()
    (d / "r.jsonl").write_text(json.dumps(record) + "\n")
    return _compile_records(d / "r.jsonl", d / "m.so")


@bad_input("records-other-device-set", "no usable record", "device set")
def _(d, s):
    (d / "r.jsonl").write_text(json.dumps(s.record_line()) + "\n")
    return _compile_records(d / "r.jsonl", d / "m.so", devices=["cpu"])


@bad_input("records-other-tvm-version", "no usable record", "TVM version")
def _(d, s):
    record = s.record_line()
    assert record["tvm"] != "0.19.0"
    record["tvm"] = "0.19.0"
    (d / "r.jsonl").write_text(json.dumps(record) + "\n")
    return _compile_records(d / "r.jsonl", d / "m.so")


@bad_input("records-placement-of-other-model", "unknown layer(s): conv2d_0")
def _(d, s):
    record = s.record_line()  # this model's fingerprint, another model's layers
    record["placement"] = {"conv2d_0": "cpu"}
    (d / "r.jsonl").write_text(json.dumps(record) + "\n")
    return _compile_records(d / "r.jsonl", d / "m.so")


@bad_input("records-no-verified-record", "none of them is a verified measurement")
def _(d, s):
    record = s.record_line()
    record["result"] = {"error": "wrong_answer", "latencies_ms": [], "message": "x"}
    (d / "r.jsonl").write_text(json.dumps(record) + "\n")
    return _compile_records(d / "r.jsonl", d / "m.so")


@bad_input("records-none-within-the-caps", "no verified record", "fits the memory caps given",
           "cpu-generic needs")
def _(d, s):
    (d / "r.jsonl").write_text(json.dumps(s.record_line()) + "\n")  # all on cpu-generic
    return _compile_records(d / "r.jsonl", d / "m.so") + ["--memory", "cpu-generic=64KiB"]


@bad_input("report-records-without-header", "has no header", "give --model and --device")
def _(d, s):
    (d / "r.jsonl").write_text(json.dumps(s.record_line()) + "\n")
    return ["report", str(d / "r.jsonl")]


@bad_input("report-header-not-a-header", "is not a tvm_hetero records header")
def _(d, s):
    (d / "r.jsonl").write_text(json.dumps(s.record_line()) + "\n")
    (d / "r.header.json").write_text(json.dumps({"format": "tvm_hetero.records_header",
                                                 "version": 1, "model": "zoo:mlp"}))
    return ["report", str(d / "r.jsonl")]


@bad_input("report-header-not-json", "records header", "is unreadable")
def _(d, s):
    (d / "r.jsonl").write_text(json.dumps(s.record_line()) + "\n")
    (d / "r.header.json").write_text("{not json")
    return ["report", str(d / "r.jsonl")]


@bad_input("tune-threshold-below-the-cost-models-minimum", "threshold 3 is below",
           "minimum of 8 training samples")
def _(d, s):
    return ["tune", "zoo:mlp", "-d", "cpu", "--threshold", "3", "-r", str(d / "r.jsonl"),
            "-o", str(d / "p.json")]


@bad_input("tune-max-devices-beyond-the-devices", "max devices must be between 1 and the 2")
def _(d, s):
    return ["tune", "zoo:mlp", "-d", "cpu", "-d", "cpu-generic", "--max-devices", "3",
            "-r", str(d / "r.jsonl"), "-o", str(d / "p.json")]


@bad_input("records-file-missing", "records file not found")
def _(d, s):
    return _compile_records(d / "none.jsonl", d / "m.so")


# ----------------------------------------------------------------------------------------------
# compile output, run inputs


@bad_input("compile-output-not-so", "must end in .so")
def _(d, s):
    return _compile("zoo:mlp", "all:cpu", str(d / "m.txt"))


@bad_input("run-library-garbage", "cannot load")
def _(d, s):
    (d / "m.so").write_text("not a library")
    return ["run", str(d / "m.so"), "--output", str(d / "out.npz")]


@bad_input("run-library-is-onnx", "cannot load")
def _(d, s):
    (d / "m.onnx").write_bytes(_cnn_bytes())
    return ["run", str(d / "m.onnx"), "--output", str(d / "out.npz")]


@bad_input("usage-repeat-not-a-number", "invalid int value: 'many'")
def _(d, s):
    return ["run", s.mlp_library(), "--repeat", "many", "--output", str(d / "out.npz")]


@bad_input("usage-compile-without-output", "the following arguments are required: --output")
def _(d, s):
    return ["compile", "zoo:mlp", "-d", "cpu", "-p", "all:cpu"]


@bad_input("run-repeat-zero", "--repeat must be >= 1")
def _(d, s):
    return ["run", s.mlp_library(), "--repeat", "0", "--output", str(d / "out.npz")]


@bad_input("inputs-wrong-shape", "has shape (2, 2)", "expects (8, 256)")
def _(d, s):
    np.savez(d / "in.npz", input=np.zeros((2, 2), np.float32))
    return _run_with_inputs(d, s, "in.npz")


@bad_input("inputs-wrong-dtype-float64", "has dtype float64", "expects float32")
def _(d, s):
    np.savez(d / "in.npz", **{k: v.astype(np.float64) for k, v in _mlp_inputs().items()})
    return _run_with_inputs(d, s, "in.npz")


@bad_input("inputs-wrong-dtype-int32", "has dtype int32", "expects float32")
def _(d, s):
    np.savez(d / "in.npz", **{k: v.astype(np.int32) for k, v in _mlp_inputs().items()})
    return _run_with_inputs(d, s, "in.npz")


@bad_input("inputs-pickled-object-array", "cannot read inputs", "allow_pickle=False")
def _(d, s):
    np.savez(d / "in.npz", input=np.array([_Evil(d / "PWNED")], dtype=object))
    return _run_with_inputs(d, s, "in.npz")


@bad_input("inputs-plain-pickle", "cannot read inputs", "pickled")
def _(d, s):
    (d / "in.npz").write_bytes(pickle.dumps({"input": _Evil(d / "PWNED")}))
    return _run_with_inputs(d, s, "in.npz")


@bad_input("inputs-missing-name", "missing ['input']", "unknown ['x']")
def _(d, s):
    np.savez(d / "in.npz", x=_mlp_inputs()["input"])
    return _run_with_inputs(d, s, "in.npz")


@bad_input("inputs-extra-name", "unknown ['extra']")
def _(d, s):
    np.savez(d / "in.npz", **_mlp_inputs(), extra=np.zeros(3, np.float32))
    return _run_with_inputs(d, s, "in.npz")


@bad_input("inputs-truncated-npz", "cannot read inputs")
def _(d, s):
    np.savez(d / "full.npz", **_mlp_inputs())
    (d / "in.npz").write_bytes((d / "full.npz").read_bytes()[:200])
    (d / "full.npz").unlink()
    return _run_with_inputs(d, s, "in.npz")


@bad_input("inputs-npy-not-npz", "cannot read inputs")
def _(d, s):
    np.save(d / "in.npy", _mlp_inputs()["input"])
    return _run_with_inputs(d, s, "in.npy")


@bad_input("inputs-file-missing", "inputs file not found")
def _(d, s):
    return _run_with_inputs(d, s, "none.npz")


# ----------------------------------------------------------------------------------------------
# tuning options


@bad_input("tune-trials-without-db", "--tune-trials needs --tuning-db")
def _(d, s):
    return _compile("zoo:mlp", "all:cpu", str(d / "m.so"), "--tune-trials", "8")


@bad_input("tune-trials-negative", "--tune-trials must be >= 0")
def _(d, s):
    return _compile("zoo:mlp", "all:cpu", str(d / "m.so"), "--tune-trials", "-1",
                    "--tuning-db", str(d / "db"))


@bad_input("tune-share-out-of-range", "--tune-share must be in (0, 1], got 1.5")
def _(d, s):
    return _compile("zoo:mlp", "all:cpu", str(d / "m.so"), "--tune-trials", "4",
                    "--tuning-db", str(d / "db"), "--tune-share", "1.5")


@bad_input("tuning-db-empty", "holds no tuned kernel")
def _(d, s):
    (d / "db").mkdir()
    return _compile("zoo:mlp", "all:cpu", str(d / "m.so"), "--tuning-db", str(d / "db"))


@bad_input("tuning-db-missing", "tuning database not found")
def _(d, s):
    return _compile("zoo:mlp", "all:cpu", str(d / "m.so"), "--tuning-db", str(d / "db"))


@bad_input("tuning-db-is-a-file", "is not a directory")
def _(d, s):
    (d / "db").write_text("x")
    return _compile("zoo:mlp", "all:cpu", str(d / "m.so"), "--tuning-db", str(d / "db"))


@bad_input("tuning-db-corrupt-choices", "unreadable tuning database")
def _(d, s):
    (d / "db").mkdir()
    (d / "db" / "choices.json").write_text('{"format": "tvm_hetero.tuning_choices", "kern')
    return _compile("zoo:mlp", "all:cpu", str(d / "m.so"), "--tuning-db", str(d / "db"))


# ----------------------------------------------------------------------------------------------
# the checks


def _stderr_lines(err: str, caplog) -> list[str]:
    """stderr as a user sees it: the log records the CLI's logging.basicConfig handler (level
    WARNING) would have written there (pytest's log capture takes them; they come before the
    error), then fd 2."""
    lines = [f"{r.levelname} {r.name}: {r.getMessage()}" for r in caplog.records
             if r.levelno >= logging.WARNING]
    return lines + [line for line in err.splitlines() if line.strip()]


@pytest.mark.parametrize("case", CASES)
def test_bad_input(case, tmp_path, shared, capfd, caplog):
    workdir = tmp_path / "work"
    workdir.mkdir()
    argv = case.setup(workdir, shared)
    capfd.readouterr()
    caplog.clear()
    before = _snapshot(workdir)
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse usage errors
        code = exit_.code
    gc.collect()  # native destructors that print (at exit in a real process) print now
    out, err = capfd.readouterr()
    lines = _stderr_lines(err, caplog)

    assert "Traceback" not in out + err, err
    assert code == 2, f"exit status {code}; stderr: {err}"
    assert lines and lines[-1].startswith("Error: "), lines
    assert "internal error" not in lines[-1], lines[-1]
    for text in case.expect:
        assert text in lines[-1], lines[-1]
    assert _snapshot(workdir) == before, "files were written, changed or left behind"
    assert not out.strip(), f"stdout: {out}"
    assert len(lines) == 1, lines


def test_cases_are_distinct():
    """Each case in CASES (the count reported in the closing note) has its own name."""
    assert len({p.id for p in CASES}) == len(CASES)


def test_records_with_unreadable_lines_still_compile(tmp_path, shared, capfd):
    """Unreadable lines (a list, a string, a truncated record) are skipped, not fatal: the
    valid record among them is built."""
    line = json.dumps(shared.record_line())
    (tmp_path / "r.jsonl").write_text(f'[1, 2]\n"hello"\n{line}\n{line[:40]}')
    code = main(_compile_records(tmp_path / "r.jsonl", tmp_path / "m.so") + ["--json"])
    out, err = capfd.readouterr()
    assert code == 0, err
    assert json.loads(out)["layers_per_device"] == {"cpu": 0, "cpu-generic": 3}


def test_dynamic_model_works_with_input_shape(tmp_path, capfd):
    """The dynamic model the error case refuses builds with --input-shape, and its outputs for
    batch 2 match onnxruntime's."""
    from tvm_hetero.testing import max_relative_error, onnx_reference

    onnx.save(_dynamic_cnn(), tmp_path / "dyn.onnx")
    layers = th.extract_layers(th.load_model(tmp_path / "dyn.onnx",
                                             input_shapes={"input": (2, 3, 32, 32)}))
    placement = th.Placement({l.name: DEVICES[i % 2] for i, l in enumerate(layers)})
    placement.save(tmp_path / "p.json", DEVICES)
    lib = tmp_path / "dyn.so"
    code = main(_compile(str(tmp_path / "dyn.onnx"), str(tmp_path / "p.json"), str(lib),
                         "--input-shape", "input=2,3,32,32"))
    assert code == 0, capfd.readouterr().err
    inputs = {"input": np.random.default_rng(4).standard_normal((2, 3, 32, 32))
              .astype(np.float32)}
    np.savez(tmp_path / "in.npz", **inputs)
    code = main(["run", str(lib), "-d", "cpu", "-d", "cpu-generic", "--inputs",
                 str(tmp_path / "in.npz"), "--output", str(tmp_path / "out.npz"), "--repeat",
                 "1"])
    assert code == 0, capfd.readouterr().err
    with np.load(tmp_path / "out.npz") as saved:
        got = [saved["output_0"]]
    assert got[0].shape[0] == 2
    want = onnx_reference(_dynamic_cnn(), inputs)
    assert max_relative_error(got, want) < 1e-4
