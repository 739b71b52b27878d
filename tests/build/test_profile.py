"""Per-kernel profiles (CompiledModel.profile, `run --profile`): every kernel of the executable's
main named with its layer, device and rule, shares adding up, rates consistent with the FLOPs
and bytes, on a built and on a loaded library, and on a library that does not describe its
kernels. No timing thresholds: the machine's speed is not under test."""

import json
import math
import re

import pytest

import tvm_hetero as th
from tvm_hetero import api
from tvm_hetero.cli.main import main
from tvm_hetero.build.profile import BETWEEN_ROW, BUILTINS_ROW, UNKNOWN

from tests.helpers.models import zoo

PLACEMENTS = ["all-cpu", "split"]


def _placement(kind, devices):
    layers = th.extract_layers(zoo("cnn"), th.PrepareConfig.for_devices(devices))
    if kind == "all-cpu":
        return th.Placement.all_on(layers, "cpu")
    return th.Placement({l.name: ("cpu", "cpu-generic")[i % 2] for i, l in enumerate(layers)})


@pytest.fixture(scope="module", params=PLACEMENTS)
def built(request, cpu_devices):
    placement = _placement(request.param, cpu_devices)
    return th.build(zoo("cnn"), placement, cpu_devices), placement


def _main_kernels(compiled) -> list[str]:
    """The kernels the executable's ``main`` calls, in order, from its bytecode text."""
    text = compiled.executable.as_text()
    body = text.split("@main:", 1)[1].split("\n\n", 1)[0]
    called = re.findall(r"^\s*call\s+(\S+)\s+in:", body, flags=re.M)
    return [name for name in called if not name.startswith("vm.builtin.")]


def _check_rows(profile, compiled, placement, rules):
    kernels = [row for row in profile.rows if row.kind == "kernel"]
    assert [row.name for row in kernels] == _main_kernels(compiled)
    for row in kernels:
        assert row.layer in placement.assignment, row
        assert row.device == placement[row.layer], row
        assert row.rule == rules[row.name], row
        assert row.calls == 1 and row.time_ms >= 0
        if row.flops:
            assert row.gflops == pytest.approx(row.flops / (row.time_ms * 1e6), rel=1e-9)
            assert row.gbps is None and "GFLOP/s" in row.rate
        else:
            assert row.gflops is None and row.bytes > 0
            assert row.gbps == pytest.approx(row.bytes / (row.time_ms * 1e6), rel=1e-9)
    # every layer whose kernel main calls has a row (a reshape becomes a VM builtin)
    called = set(_main_kernels(compiled))
    described = compiled.meta["kernels"]
    for layer in placement.assignment:
        if any(layer in info["layers"] for name, info in described.items() if name in called):
            assert layer in {row.layer for row in kernels}, layer
    assert any(row.flops and row.flops > 0 for row in kernels)  # the convolutions
    assert math.isclose(sum(row.share for row in profile.rows), 1.0, abs_tol=1e-9)
    assert profile.total_ms == pytest.approx(sum(row.time_ms for row in profile.rows))
    summary = {row.name for row in profile.rows if row.index < 0}
    assert summary == {BUILTINS_ROW, BETWEEN_ROW}
    assert profile.run_ms > 0 and profile.plain_ms > 0 and profile.described


def test_profile_names_every_kernel(built):
    compiled, placement = built
    profile = compiled.profile(zoo("cnn").random_inputs(), repeat=2, warmup=1)
    _check_rows(profile, compiled, placement, compiled.stats.rules)
    assert profile.statistic == "median" and profile.repeat == 2
    copies = [row for row in profile.rows if row.kind == "copy"]
    if len(set(placement.assignment.values())) == 1:
        assert not copies
    else:
        assert {row.device for row in copies} == {"cpu -> cpu-generic", "cpu-generic -> cpu"}
        assert all(row.bytes > 0 and row.gbps is not None for row in copies)
    assert profile.devices == compiled.devices.names


def test_profile_json_and_table(built):
    compiled, _ = built
    profile = compiled.profile(zoo("cnn").random_inputs(), repeat=1, warmup=0,
                               statistic="min")
    data = json.loads(json.dumps(profile.to_json()))
    assert data["statistic"] == "min" and len(data["rows"]) == len(profile.rows)
    assert set(data["rows"][0]) >= {"name", "kind", "layer", "device", "rule", "time_ms",
                                    "share", "flops", "bytes", "gflops", "gbps"}
    assert data["calls"] == profile.calls > len(profile.rows) - 2
    lines = profile.table(top=3).splitlines()
    assert lines[0].split()[:4] == ["kernel", "layer", "device", "rule"]
    assert len(lines) == 1 + 3 + 1 + 1 and "more rows" in lines[4]  # the min: no note
    slowest = profile.by_time()[0]
    assert lines[1].startswith(slowest.name)
    assert len(profile.table().splitlines()) == 1 + len(profile.rows) + 1


def test_mean_rows_add_up_to_the_mean_run(built):
    compiled, _ = built
    profile = compiled.profile(zoo("cnn").random_inputs(), repeat=3, warmup=0,
                               statistic="mean")
    assert profile.total_ms == pytest.approx(profile.run_ms, rel=1e-9)


def test_profile_arguments_checked(built):
    compiled, _ = built
    with pytest.raises(th.InputError, match="statistic"):
        compiled.profile(zoo("cnn").random_inputs(), statistic="mode")
    with pytest.raises(th.InputError, match="repeat"):
        compiled.profile(zoo("cnn").random_inputs(), repeat=0)


def test_profile_after_export_and_load(built, tmp_path):
    compiled, placement = built
    used = len(set(placement.assignment.values()))
    path = compiled.export_library(str(tmp_path / f"cnn_on_{used}_devices.so"))
    loaded = th.load(path)
    assert loaded.meta["kernels"] == compiled.meta["kernels"]
    profile = loaded.profile(zoo("cnn").random_inputs(), repeat=1, warmup=1)
    _check_rows(profile, compiled, placement, compiled.stats.rules)


def test_a_library_without_kernel_records_still_profiles(tmp_path, monkeypatch):
    """Libraries built before hetero_meta() described its kernels: rows say unknown."""
    import importlib

    build_module = importlib.import_module("tvm_hetero.build.compile")
    add = build_module._add_meta_function

    def without_kernels(mod, meta):
        return add(mod, {k: v for k, v in meta.items() if k != "kernels"})

    monkeypatch.setattr(build_module, "_add_meta_function", without_kernels)
    compiled = th.build(zoo("mlp"), "all:cpu-generic", ["cpu", "cpu-generic"])
    monkeypatch.undo()
    loaded = th.load(compiled.export_library(str(tmp_path / "old_mlp.so")))
    assert "kernels" not in loaded.meta
    profile = loaded.profile(zoo("mlp").random_inputs(), repeat=1, warmup=0)
    kernels = [row for row in profile.rows if row.kind == "kernel"]
    assert [row.name for row in kernels] == _main_kernels(compiled)
    assert all(row.layer == UNKNOWN and row.rule == UNKNOWN for row in kernels)
    assert all(row.device == "cpu-generic" and row.gbps is not None for row in kernels)
    assert not profile.described and "unknown" in profile.table()
    assert math.isclose(sum(row.share for row in profile.rows), 1.0, abs_tol=1e-9)


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("profile") / "cnn_split.so")
    api.compile_model("zoo:cnn", ["cpu", "cpu-generic"], path,
                      placement=_placement("split", th.DeviceSet.parse(["cpu", "cpu-generic"])))
    return path


def test_run_library_profile(library):
    ran = api.run_library(library, repeat=1, warmup=0, profile=True, profile_top=2)
    assert ran.profile is not None and "(" in ran.profile_table()
    assert len(ran.to_json()["profile"]["rows"]) == len(ran.profile.rows)
    assert api.run_library(library, repeat=1, warmup=0).profile is None


def test_cli_run_profile(library, capsys):
    code = main(["run", library, "--profile", "--profile-top", "4", "--repeat", "2"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "median" in out.splitlines()[0]  # the latency line, then the table
    assert out.splitlines()[1].split()[:3] == ["kernel", "layer", "device"]
    assert "more rows" in out and "ms instrumented" in out
    code = main(["run", library, "--profile", "--json", "--repeat", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    rows = data["profile"]["rows"]
    assert {row["kind"] for row in rows} == {"kernel", "copy", "builtin", "other"}
    assert math.isclose(sum(row["share"] for row in rows), 1.0, abs_tol=1e-9)


@pytest.mark.parametrize("flags, message", [
    (["--profile-top", "3"], "--profile-top needs --profile"),
    (["--profile", "--profile-top", "0"], "--profile-top must be >= 1"),
    (["--profile-stat", "mean"], "--profile-stat needs --profile"),
])
def test_cli_bad_profile_flags(library, capsys, flags, message):
    code = main(["run", library, *flags])
    _assert_one_line_error(code, capsys, message)


def test_cli_unknown_profile_statistic(library, capsys):
    with pytest.raises(SystemExit) as exit:  # argparse's choices: the parser's own Error line
        main(["run", library, "--profile", "--profile-stat", "mode"])
    _assert_one_line_error(exit.value.code, capsys, "invalid choice: 'mode'")


def _assert_one_line_error(code, capsys, message):
    _, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("Error: ") and message in lines[0]
