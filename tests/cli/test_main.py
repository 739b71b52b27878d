import json

import numpy as np
import onnx
import pytest

import tvm_hetero as th
from tvm_hetero.cli.main import main

from tests.helpers.cli import run_cli
from tests.helpers.models import zoo


def cli(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, err, pattern):
    assert code != 0
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("Error: ") and "Traceback" not in err
    assert pattern in lines[0], lines[0]


def test_inspect_table_and_json(capsys):
    code, out, _ = cli(capsys, "inspect", "zoo:cnn")
    assert code == 0 and "conv2d_0" in out and "6 layers" in out
    code, out, _ = cli(capsys, "inspect", "zoo:resnet", "--json")
    data = json.loads(out)
    assert data["model"] == "resnet" and data["inputs"][0]["shape"] == [1, 3, 32, 32]
    layer = {l["name"]: l for l in data["layers"]}["conv2d_2"]
    assert set(layer) >= {"name", "kind", "flops", "param_bytes", "predecessors"}
    assert layer["kind"] == "conv2d"  # the residual: conv2d_0's output, written blocked
    assert set(layer["predecessors"]) == {"conv2d_0", "conv2d_1"}


def test_compile_then_run_end_to_end(tmp_path, capsys):
    layers = th.extract_layers(zoo("cnn"))
    placement = th.Placement({l.name: ["cpu", "cpu-generic"][i % 2] for i, l in enumerate(layers)})
    placement.save(tmp_path / "p.json", ["cpu", "cpu-generic"])
    lib = tmp_path / "cnn.so"
    code, out, err = cli(capsys, "compile", "zoo:cnn", "--device", "cpu", "--device",
                         "cpu-generic", "--placement", str(tmp_path / "p.json"), "-o", str(lib))
    assert code == 0, err
    assert "cpu (3), cpu-generic (3)" in out and lib.exists()

    inputs = zoo("cnn").random_inputs(seed=9)
    np.savez(tmp_path / "in.npz", **inputs)
    code, out, err = cli(capsys, "run", str(lib), "-d", "cpu", "-d", "cpu-generic", "--inputs",
                         str(tmp_path / "in.npz"), "--output", str(tmp_path / "out.npz"),
                         "--repeat", "3", "--json")
    assert code == 0, err
    summary = json.loads(out)
    latency = summary["latency_ms"]
    assert latency["repeat"] == 3 and 0 < latency["min"] <= latency["median"] <= latency["max"]
    with np.load(tmp_path / "out.npz") as saved:
        got = saved["output_0"]
    want = th.build(zoo("cnn"), placement, ["cpu", "cpu-generic"]).run(inputs)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_all_shorthand_save_placement_and_random_inputs(tmp_path, capsys):
    lib = tmp_path / "mlp.so"
    code, out, err = cli(capsys, "compile", "zoo:mlp", "-d", "cpu", "-d", "cpu-generic",
                         "-p", "all:cpu-generic", "-o", str(lib), "--save-placement",
                         str(tmp_path / "p.json"), "--json")
    assert code == 0, err
    assert json.loads(out)["layers_per_device"] == {"cpu": 0, "cpu-generic": 3}
    saved = th.Placement.load(tmp_path / "p.json")
    assert set(saved.assignment.values()) == {"cpu-generic"}
    code, out, err = cli(capsys, "run", str(lib), "--repeat", "2")
    assert code == 0, err
    assert "median" in out and "cpu-generic" in out


def test_console_script_in_a_fresh_process(tmp_path):
    result = run_cli("compile", "zoo:mlp", "-d", "cpu", "-p", "all:cpu", "-o",
                     str(tmp_path / "m.so"))
    assert result.returncode == 0, result.stderr
    result = run_cli("run", str(tmp_path / "m.so"), "--json", "--repeat", "2")
    assert result.returncode == 0, result.stderr
    assert set(json.loads(result.stdout)["latency_ms"]) >= {"median", "min", "max"}
    assert "Warning" not in result.stderr  # TVM's native export/load chatter is silenced


def test_error_cases_are_one_line(tmp_path, capsys):
    layers = [l.name for l in th.extract_layers(zoo("mlp"))]
    out = str(tmp_path / "x.so")
    base = ["compile", "zoo:mlp", "-d", "cpu", "-o", out, "-p"]

    assert_one_line_error(*cli(capsys, "compile", "zoo:mlp", "-d", "gpu", "-p", "all:cpu",
                               "-o", out)[::2], "unknown device 'gpu'")
    (tmp_path / "unknown_layer.json").write_text(json.dumps(
        {"placement": {**{n: "cpu" for n in layers}, "conv9": "cpu"}}))
    assert_one_line_error(*cli(capsys, *base, str(tmp_path / "unknown_layer.json"))[::2],
                          "unknown layer(s): conv9")
    (tmp_path / "unknown_dev.json").write_text(json.dumps({n: "tpu" for n in layers}))
    assert_one_line_error(*cli(capsys, *base, str(tmp_path / "unknown_dev.json"))[::2],
                          "unknown device(s): tpu")
    (tmp_path / "missing.json").write_text(json.dumps({layers[0]: "cpu"}))
    assert_one_line_error(*cli(capsys, *base, str(tmp_path / "missing.json"))[::2],
                          "missing 2 layer(s)")
    (tmp_path / "broken.json").write_text("{not json")
    assert_one_line_error(*cli(capsys, *base, str(tmp_path / "broken.json"))[::2],
                          "not valid JSON")
    assert_one_line_error(*cli(capsys, "inspect", str(tmp_path / "none.onnx"))[::2],
                          "model file not found")
    (tmp_path / "corrupt.onnx").write_bytes(b"\x08\x01garbage")
    assert_one_line_error(*cli(capsys, "inspect", str(tmp_path / "corrupt.onnx"))[::2],
                          "not a valid ONNX model")
    assert_one_line_error(*cli(capsys, "run", str(tmp_path / "none.so"))[::2],
                          "compiled model not found")
    assert_one_line_error(*cli(capsys, "compile", "zoo:mlp", "-d", "cpu", "-p", "all:cpu",
                               "-o", str(tmp_path / "no" / "dir.so"))[::2],
                          "output directory does not exist")
    assert not (tmp_path / "x.so").exists()


def test_run_errors_one_line(tmp_path, capsys):
    import tvm

    lib = tmp_path / "mlp.so"
    assert cli(capsys, "compile", "zoo:mlp", "-d", "cpu", "-p", "all:cpu", "-o", str(lib))[0] == 0
    np.savez(tmp_path / "bad.npz", input=np.zeros((2, 2), np.float32))
    assert_one_line_error(*cli(capsys, "run", str(lib), "--inputs",
                               str(tmp_path / "bad.npz"))[::2], "has shape (2, 2)")
    (tmp_path / "bad2.npz").write_bytes(b"not a zip")
    assert_one_line_error(*cli(capsys, "run", str(lib), "--inputs",
                               str(tmp_path / "bad2.npz"))[::2], "cannot read inputs")
    assert_one_line_error(*cli(capsys, "run", str(lib), "-d", "cuda")[::2],
                          "expects a llvm device where 'cuda' (cuda) was given")
    assert_one_line_error(*cli(capsys, "run", str(lib), "-d", "a=cpu", "-d", "b=cpu-generic")[::2],
                          "built for 1 device(s)")
    if tvm.runtime.enabled("cuda") and tvm.cuda(0).exist:
        return
    cuda_lib = tmp_path / "mlp_cuda.so"
    code, _, err = cli(capsys, "compile", "zoo:mlp", "-d", "cpu", "-d", "cuda", "-p", "all:cuda",
                       "-o", str(cuda_lib))
    assert code == 0, err  # compiling for CUDA works without a GPU
    assert_one_line_error(*cli(capsys, "run", str(cuda_lib), "-d", "cpu", "-d", "cuda")[::2],
                          "contains cuda code")


def test_unsupported_op_names_the_op(tmp_path, capsys):
    model = zoo("mlp").onnx_model
    model = onnx.ModelProto.FromString(model.SerializeToString())
    model.graph.node[1].op_type = "NoSuchOp"
    onnx.save(model, tmp_path / "bad_op.onnx")
    code, _, err = cli(capsys, "inspect", str(tmp_path / "bad_op.onnx"))
    assert code != 0 and "NoSuchOp" in err and "Traceback" not in err


def test_no_command_prints_help(capsys):
    code, _, err = cli(capsys)
    assert code == 2 and "usage: tvm-hetero" in err


def test_devices_status_json(capsys):
    code, out, err = cli(capsys, "devices", "-d", "cpu", "-d", "cpu-generic", "--memory",
                         "cpu-generic=64MiB", "--model", "zoo:mlp", "--json")
    assert code == 0, err
    data = json.loads(out)
    generic = {d["name"]: d for d in data["devices"]}["cpu-generic"]
    assert generic["memory_bytes"] == 64 * 2**20 and generic["memory_is_cap"]
    assert all(d["gflops"] > 0 and d["bandwidth_gbs"] > 0 for d in data["devices"])
    # zoo:mlp has ~4 FLOP per parameter byte: memory weighs most
    assert data["weights"]["memory"] > data["weights"]["compute"]
    assert_one_line_error(*cli(capsys, "devices", "-d", "cpu", "--memory", "cpu")[::2],
                          "invalid --memory")


def test_compile_from_records_and_memory_caps(tmp_path, capsys):
    from tvm_hetero.search.records import PlacementRecords
    from tvm_hetero.measure import ErrorKind, MeasureResult

    model = zoo("mlp")
    devices = th.DeviceSet.parse(["cpu", "cpu-generic"])
    layers = th.extract_layers(model)
    fast = th.Placement({l.name: "cpu-generic" for l in layers})
    slow = th.Placement({l.name: "cpu" for l in layers})
    wrong = th.Placement({layers[0].name: "cpu", layers[1].name: "cpu-generic",
                          layers[2].name: "cpu"})
    records = tmp_path / "r.jsonl"
    db = PlacementRecords(records, model.fingerprint(), devices.fingerprint())
    db.commit(slow, MeasureResult(ErrorKind.NONE, [2.0]))
    db.commit(fast, MeasureResult(ErrorKind.NONE, [1.0]))
    db.commit(wrong, MeasureResult(ErrorKind.WRONG_ANSWER, message="x"))
    lib = tmp_path / "m.so"
    code, out, err = cli(capsys, "compile", "zoo:mlp", "-d", "cpu", "-d", "cpu-generic",
                         "--records", str(records), "-o", str(lib), "--json")
    assert code == 0, err
    assert json.loads(out)["layers_per_device"] == {"cpu": 0, "cpu-generic": 3}
    # the best record within the caps given now: all on cpu-generic exceeds 64 KiB
    code, out, err = cli(capsys, "compile", "zoo:mlp", "-d", "cpu", "-d", "cpu-generic",
                         "--memory", "cpu-generic=64KiB", "--records", str(records), "-o",
                         str(lib), "--json")
    assert code == 0, err
    assert json.loads(out)["layers_per_device"] == {"cpu": 3, "cpu-generic": 0}
    # records of another model are not used
    assert_one_line_error(*cli(capsys, "compile", "zoo:cnn", "-d", "cpu", "-d", "cpu-generic",
                               "--records", str(records), "-o", str(lib))[::2],
                          "no usable record")
    assert_one_line_error(*cli(capsys, "compile", "zoo:mlp", "-d", "cpu", "-d", "cpu-generic",
                               "--memory", "cpu-generic=64KiB", "-p", "all:cpu-generic",
                               "-o", str(lib))[::2], "exceeds memory caps")
    assert_one_line_error(*cli(capsys, "compile", "zoo:mlp", "-d", "cpu", "--memory",
                               "cpu=12XB", "-p", "all:cpu", "-o", str(lib))[::2],
                          "invalid memory size")


def test_tune_json_then_compile_the_placement(tmp_path, capsys):
    records = tmp_path / "r.jsonl"
    placement = tmp_path / "best.json"
    code, out, err = cli(capsys, "tune", "zoo:mlp", "-d", "cpu", "-d", "cpu-generic",
                         "--memory", "cpu-generic=600KiB", "--trials", "5", "--records",
                         str(records), "-o", str(placement), "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert set(summary) >= {"placement", "median_ms", "best_single_device", "measured",
                            "candidates", "speedup"}
    assert summary["candidates"] == 5 and summary["measured"] == 5
    assert summary["best_single_device"]["device"] == "cpu"  # 1 MiB of weights > 600 KiB
    assert summary["median_ms"] <= summary["best_single_device"]["median_ms"]
    assert th.Placement.load(placement).assignment == summary["placement"]
    code, out, err = cli(capsys, "compile", "zoo:mlp", "-d", "cpu", "-d", "cpu-generic",
                         "--placement", str(placement), "-o", str(tmp_path / "m.so"))
    assert code == 0, err
    # the same records again: nothing is measured twice
    code, out, err = cli(capsys, "tune", "zoo:mlp", "-d", "cpu", "-d", "cpu-generic",
                         "--memory", "cpu-generic=600KiB", "--trials", "5", "--records",
                         str(records), "-o", str(placement), "--json")
    assert code == 0, err
    assert json.loads(out)["measured"] == 0


def test_usage_mistakes_are_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["tune", "zoo:mlp", "-d", "cpu", "--strategy", "nope", "-r", "r", "-o", "o"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert_one_line_error(2, err, "invalid choice: 'nope'")


def test_inspect_follows_the_devices_preparation(capsys):
    """inspect prepares the model for the devices given (default: the host CPU, `cpu`): an
    AVX2 CPU's blocked layout has 8 channels per block."""
    def block_widths(*devices):
        code, out, err = cli(capsys, "inspect", "zoo:resnet", "--json", *devices)
        assert code == 0, err
        return {layer["outputs"][0][-1] for layer in json.loads(out)["layers"]
                if len(layer["outputs"][0]) == 5}  # NCHW[x]c outputs

    haswell = '{"kind": "llvm", "mcpu": "haswell"}'
    # (the layout transforms of the blocked form are not layers: the image's 3 channels, one
    # block, are no layer's output)
    assert block_widths("-d", haswell) == {8}
    assert block_widths("-d", "cpu-generic") == {4}
    assert block_widths() == block_widths("-d", "cpu")


def test_the_cli_uses_nothing_of_tvm_hetero_but_the_interface():
    """The CLI parses arguments and prints: what it uses of tvm_hetero comes from
    tvm_hetero.api (and tvm_hetero.errors, for the error boundary and argument errors)."""
    import ast
    from pathlib import Path

    import tvm_hetero.cli

    allowed = {"tvm_hetero.api", "tvm_hetero.errors"}
    used = set()
    for path in sorted(Path(tvm_hetero.cli.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                continue  # the CLI's own modules
            if isinstance(node, ast.ImportFrom) and node.level == 2:
                base = "tvm_hetero" + (f".{node.module}" if node.module else "")
                used |= {base if node.module else f"{base}.{a.name}" for a in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tvm_hetero"):
                used.add(node.module)
            elif isinstance(node, ast.Import):
                used |= {a.name for a in node.names if a.name.startswith("tvm_hetero")}
    assert used == allowed


def _pow_gather_model(path):
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Pow", ["x", "three"], ["p"]),
         helper.make_node("Gather", ["p", "idx"], ["y"], axis=0)], "pow_gather",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 8])],
        [numpy_helper.from_array(np.array([0, 2, 3], dtype=np.int64), "idx"),
         numpy_helper.from_array(np.array(3.0, dtype=np.float32), "three")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_tvm_native_warnings_only_under_verbose(tmp_path, capfd, caplog):
    # TVM's native code writes "Detected pow(x, y) where y >= 3" and "Fast mode segfaults ..."
    # straight to fd 2 on every build of such a model: noise that belongs under -v
    _pow_gather_model(tmp_path / "m.onnx")
    args = ["compile", str(tmp_path / "m.onnx"), "-d", "cpu", "-p", "all:cpu",
            "-o", str(tmp_path / "m.so")]
    assert main(args) == 0
    out, err = capfd.readouterr()
    assert "wrote" in out and "Detected pow" not in err and "Fast mode" not in err, err
    with caplog.at_level("INFO", logger="tvm_hetero"):
        assert main(["-v"] + args) == 0
    messages = [r.getMessage() for r in caplog.records if r.name == "tvm_hetero._native"]
    assert any(m.startswith("TVM: Detected pow(x, y) where y >= 3") for m in messages), messages
    assert any("Fast mode segfaults" in m for m in messages), messages
