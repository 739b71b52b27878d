import json

import pytest

from tvm_hetero import DeviceSet, Placement, PlacementError


def test_json_round_trip_is_readable(tmp_path):
    placement = Placement({"conv2d_0": "cpu", "matmul_0": "cpu-generic"}, model="cnn")
    path = tmp_path / "p.json"
    placement.save(path, DeviceSet.parse(["cpu", "cpu-generic"]))
    data = json.loads(path.read_text())
    assert data == {"format": "tvm_hetero.placement", "version": 1, "model": "cnn",
                    "devices": ["cpu", "cpu-generic"],
                    "placement": {"conv2d_0": "cpu", "matmul_0": "cpu-generic"}}
    assert Placement.load(path) == placement
    assert not (tmp_path / "p.json.tmp").exists()


def test_bare_mapping_and_all_shorthand(tmp_path):
    path = tmp_path / "bare.json"
    path.write_text(json.dumps({"a": "cpu", "b": "cpu"}))
    assert Placement.load(path).assignment == {"a": "cpu", "b": "cpu"}
    assert Placement.parse("all:cuda", ["a", "b"]).assignment == {"a": "cuda", "b": "cuda"}
    with pytest.raises(PlacementError, match="needs a device name"):
        Placement.parse("all:", ["a"])


@pytest.mark.parametrize("content, message", [
    ("[1, 2]", "expected a JSON object"),
    ('{"placement": {"a": 3}}', "must map layer names to device names"),
    ('{"placement": {}}', "empty"),
    ('{"format": "other", "placement": {"a": "cpu"}}', "format is 'other'"),
    ('{"version": 99, "placement": {"a": "cpu"}}', "newer"),
    ("{broken", "not valid JSON"),
])
def test_malformed_files(tmp_path, content, message):
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(PlacementError, match=message):
        Placement.load(path)


def test_validate_names_what_is_wrong():
    devices = DeviceSet.parse(["cpu"])
    layers = [f"l{i}" for i in range(12)]
    with pytest.raises(PlacementError, match=r"missing 12 layer\(s\): l0, .* \(and 4 more\)"):
        Placement({"x": "cpu"}).validate(["x"] + layers, devices)
    with pytest.raises(PlacementError, match="unknown layer"):
        Placement({"zz": "cpu", **{l: "cpu" for l in layers}}).validate(layers, devices)
    with pytest.raises(PlacementError, match="unknown device"):
        Placement({l: "gpu" for l in layers}).validate(layers, devices)
    Placement({l: "cpu" for l in layers}).validate(layers, devices)
