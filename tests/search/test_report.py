import json

import pytest

import tvm_hetero as th
from tvm_hetero.search.records import PlacementRecords
from tvm_hetero.measure import ErrorKind, MeasureResult
from tvm_hetero.measure.profiles import Profile, TransferFit
from tvm_hetero.search.report import history_by_strategy, layer_rows, write_report

from tests.helpers.models import zoo

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def records(tmp_path, cpu_devices):
    model = zoo("cnn")
    layers = th.extract_layers(model)
    db = PlacementRecords(tmp_path / "r.jsonl", model.fingerprint(), cpu_devices.fingerprint())
    names = cpu_devices.names
    db.commit(th.Placement.all_on(layers, "cpu"), MeasureResult(ErrorKind.NONE, [2.0]),
              {"strategy": "xgb", "source": "single-device"})
    split = th.Placement({l.name: names[i % 2] for i, l in enumerate(layers)})
    db.commit(split, MeasureResult(ErrorKind.NONE, [1.0]), {"strategy": "xgb"})
    db.commit(th.Placement({l.name: names[(i + 1) % 2] for i, l in enumerate(layers)}),
              MeasureResult(ErrorKind.RUN_TIMEOUT), {"strategy": "random"})
    db.commit(th.Placement.all_on(layers, "cpu-generic"), MeasureResult(ErrorKind.NONE, [1.5]),
              {"strategy": "random"})
    return model, layers, split, str(tmp_path / "r.jsonl")


def test_report_files_and_summary(records, cpu_devices, tmp_path):
    model, layers, split, path = records
    profile = Profile("m", "d", {l.name: {"cpu": 0.1, "cpu-generic": 0.2} for l in layers},
                      {("cpu", "cpu-generic"): TransferFit(0, 1e-9),
                       ("cpu-generic", "cpu"): TransferFit(0, 1e-9)})
    summary = write_report(str(tmp_path / "out"), model, cpu_devices, path, profile, layers)
    assert summary["placement"] == split.assignment and summary["median_ms"] == 1.0
    assert summary["best_single_device"] == {"device": "cpu-generic", "median_ms": 1.5}
    assert summary["speedup"] == pytest.approx(1.5)
    assert summary["outcomes"] == {"ok": 3, "run_timeout": 1}
    for key in ("placement_plot", "search_plot"):
        with open(summary["files"][key], "rb") as handle:
            assert handle.read(8) == PNG
    text = open(summary["files"]["report"]).read()
    assert "**1.50x**" in text and "![placement](placement.png)" in text
    assert sum(line.startswith("| ") for line in text.splitlines()) == len(layers) + 1
    json.dumps({k: v for k, v in summary.items()})  # JSON-able for --json


def test_layer_rows_count_bytes_sent_across(records):
    _, layers, split, _ = records
    rows = {r["layer"]: r for r in layer_rows(layers, split)}
    # alternating devices: every layer but the last sends its output across once
    first = layers[0]
    assert rows[first.name]["bytes_sent"] == first.activation_bytes_out
    assert rows[first.name]["sent_to"] == ["cpu-generic"]
    assert rows[layers[-1].name]["bytes_sent"] == 0


def test_history_per_strategy(records, cpu_devices):
    model, _, _, path = records
    db = PlacementRecords(path, model.fingerprint(), cpu_devices.fingerprint())
    assert history_by_strategy(db) == {"xgb": [2.0, 1.0], "random": [float("inf"), 1.5]}


def test_report_cli_without_usable_records(tmp_path, capsys, records):
    from tvm_hetero.cli.main import main

    _, _, _, path = records
    code = main(["report", path, "--model", "zoo:mlp", "-d", "cpu", "-d", "cpu-generic",
                 "-o", str(tmp_path / "rep")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("Error: no verified record for mlp")
    code = main(["report", path, "--model", "zoo:cnn", "-d", "cpu", "-d", "cpu-generic",
                 "-o", str(tmp_path / "rep"), "--json"])
    out = capsys.readouterr().out
    assert code == 0 and json.loads(out)["speedup"] == pytest.approx(1.5)


def test_the_report_summary_keeps_long_layer_names_apart_from_their_kind(capsys):
    from tvm_hetero.cli.report_cmd import print_summary

    row = {"layer": "te_layout_transform_1", "kind": "elementwise", "flops": 0.0,
           "param_bytes": 0, "device": "cpu", "cost_ms": {"cpu": 0.001}, "sent_to": [],
           "bytes_sent": 0}
    print_summary({"model": "vgg", "devices": ["cpu"], "median_ms": 0.064, "speedup": None,
                   "layers": [row, {**row, "layer": "conv2d_0", "kind": "conv2d"}],
                   "files": {"report": "r.md", "placement_plot": "p.png",
                             "search_plot": "s.png"}})
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].split() == ["te_layout_transform_1", "elementwise", "0.00", "0.0", "cpu",
                                "0.001"]
    # one width for the column: the kinds line up
    assert lines[2].index("elementwise") == lines[3].index("conv2d", len("conv2d_0")) \
        == lines[1].index("kind")


def test_report_needs_only_the_records_when_tune_wrote_their_header(tmp_path, capsys):
    from tvm_hetero.cli.main import main
    from tvm_hetero.search.records import header_path
    from tvm_hetero.search import tune
    from tvm_hetero.testing import FakeBuilder, FakeRunner

    devices = th.DeviceSet.parse(["cpu", "cpu-generic"])
    records = tmp_path / "runs" / "r.jsonl"

    def cost(placement):  # cpu-generic is the faster device
        return sum(1.0 if device == "cpu" else 0.5 for device in placement.assignment.values())

    tune("zoo:mlp", devices, trials=8, strategy="exhaustive", records=str(records),
         workdir=str(tmp_path / "w"), builder=FakeBuilder(), runner=FakeRunner(cost),
         use_profile=False)
    header = json.loads(open(header_path(str(records))).read())
    assert header["model"] == "zoo:mlp" and header["devices"] == devices.to_json()
    code = main(["report", str(records), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out)
    assert summary["model"] == "mlp" and summary["devices"] == ["cpu", "cpu-generic"]
    assert summary["files"]["report"] == str(tmp_path / "runs" / "r.report" / "report.md")
    assert summary["best_single_device"]["device"] == "cpu-generic"
    # the flags override the header: with a cap cpu-generic alone is out (1 MiB of weights)
    code = main(["report", str(records), "--memory", "cpu-generic=600KiB", "-o",
                 str(tmp_path / "capped"), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["best_single_device"]["device"] == "cpu"
    code = main(["report", str(records), "--model", "zoo:mlp", "-d", "cpu", "-d",
                 "cpu-generic", "-m", "cpu=600KiB", "--json"])
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out)["best_single_device"]["device"] == "cpu-generic"
    assert json.loads(out)["placement"] == {n: "cpu-generic" for n in summary["placement"]}


def test_the_report_takes_the_layers_of_a_build_for_its_devices(tmp_path):
    """Without layers given, write_report prepares the model for its devices, as the search
    measured it: an AVX2 CPU (8 lanes) pads no channel of a 168-channel convolution, the
    AVX-512 host's preparation (16 lanes) would (this host: see the README's CPU)."""
    from tests.helpers.models import conv_chain

    from tvm_hetero.search import tune
    from tvm_hetero.testing import FakeBuilder, FakeRunner

    devices = th.DeviceSet.parse(['{"kind": "llvm", "mcpu": "haswell"}', "cpu-generic"])
    model = th.load_model(conv_chain(168, 8))
    records = str(tmp_path / "r.jsonl")
    tune(model, devices, trials=4, strategy="exhaustive", records=records,
         workdir=str(tmp_path / "w"), builder=FakeBuilder(), runner=FakeRunner(lambda p: 1.0),
         use_profile=False, retime=0)
    summary = th.write_report(str(tmp_path / "report"), model, devices, records)
    layers = th.extract_layers(model, th.PrepareConfig.for_devices(devices))
    assert [row["param_bytes"] for row in summary["layers"]] == \
        [layer.param_bytes for layer in layers]
