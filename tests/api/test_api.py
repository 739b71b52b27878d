"""The interface layer called from Python with Python objects (the CLI tests call it with the
flags' strings)."""

import numpy as np
import pytest

import tvm_hetero as th
from tvm_hetero import api


def test_compile_and_run_from_python(tmp_path):
    model = th.load_model("zoo:mlp")
    devices = th.DeviceSet.parse(["cpu", "cpu-generic"])
    layers = th.extract_layers(model, th.PrepareConfig.for_devices(devices))
    placement = th.Placement({l.name: ("cpu", "cpu-generic")[i % 2]
                              for i, l in enumerate(layers)})
    out = str(tmp_path / "mlp.so")
    built = api.compile_model(model, devices, out, placement=placement)
    assert built.layers_per_device == {"cpu": (len(layers) + 1) // 2,
                                       "cpu-generic": len(layers) // 2}
    assert built.to_json()["output"] == out and built.placement is placement
    inputs = model.random_inputs()
    ran = api.run_library(out, inputs=inputs, repeat=1, warmup=0)
    np.testing.assert_allclose(ran.outputs[0], built.compiled.run(inputs)[0], rtol=1e-6)
    assert ran.to_json()["devices"] == ["cpu", "cpu-generic"]


def test_compile_needs_one_source_of_placement(tmp_path):
    with pytest.raises(th.PlacementError, match="one of them"):
        api.compile_model("zoo:mlp", ["cpu"], str(tmp_path / "x.so"))
    with pytest.raises(th.PlacementError, match="one of them"):
        api.compile_model("zoo:mlp", ["cpu"], str(tmp_path / "x.so"), placement="all:cpu",
                          records=str(tmp_path / "r.jsonl"))
    with pytest.raises(th.HeteroError, match="output directory does not exist"):
        api.compile_model("zoo:mlp", ["cpu"], str(tmp_path / "no" / "x.so"),
                          placement="all:cpu")
