"""A placement with a reason a user recognises: the recommendation model's
embedding tables beyond a GPU memory cap stay on the CPU, its dense layers go to the GPU, and
the split builds into one executable for ``cuda@sm_90`` without a GPU."""

import numpy as np
import pytest

import tvm_hetero as th
from tvm_hetero.build.memory import fits, memory_use
from tvm_hetero.optimize import default_table
from tvm_hetero.search import candidates
from tvm_hetero.testing import max_relative_error, onnx_reference
from tvm_hetero.testing.recommendation import SMALL, recommendation_model

CUDA = "cuda@sm_90"
# SMALL: 4 tables of 2000 x 16 float32 (125 KiB each); the dense layers (64 wide, batch 32)
# need about 40 KiB with their largest activations: a 100 KiB cap holds them, not a table
CAP = "100KiB"
# the layers of one embedding bag: index check, negative-index wrap, lookup, sum pooling
BAG_PREFIXES = ("index_guard_gather_", "less_", "take_", "sum_")


@pytest.fixture(scope="module")
def small():
    proto, feed = recommendation_model(**SMALL)
    model = th.load_model(proto, name="dlrm_small")
    devices = th.DeviceSet.parse(["cpu", CUDA], memory={"cuda": CAP})
    layers = th.extract_layers(model, th.PrepareConfig.for_devices(devices))
    return proto, feed, model, devices, layers


def _tables(layers):
    return [layer for layer in layers if layer.param_bytes >= 2000 * 16 * 4]


def _cuda_rules(compiled, layers, placement):
    """{layer: the rule that scheduled its kernel} for the layers on cuda (a kernel shared by
    layers on both devices is copied per device, the copy named after the device)."""
    rules = compiled.stats.rules
    return {layer.name: rules.get(f"{layer.func_name}_cuda", rules.get(layer.func_name))
            for layer in layers if placement[layer.name] == "cuda"}


def test_model_shape_and_sizes():
    proto, feed = recommendation_model(**SMALL)
    tables = [init for init in proto.graph.initializer if init.name.startswith("table_")]
    assert [tuple(t.dims) for t in tables] == [(2000, 16)] * 4
    assert sorted(feed) == ["dense_features", "ids_0", "ids_1", "ids_2", "ids_3"]
    assert feed["ids_0"].shape == (32, 2) and feed["ids_0"].dtype == np.int64
    assert 0 <= feed["ids_3"].min() and feed["ids_3"].max() < 2000
    again, feed_again = recommendation_model(**SMALL)
    assert again.SerializeToString() == proto.SerializeToString()  # seeded
    assert np.array_equal(feed_again["ids_2"], feed["ids_2"])
    with pytest.raises(ValueError, match="rows must be >= 1"):
        recommendation_model(rows=0)


def test_matches_onnxruntime_on_cpu(small):
    proto, feed, model, _, _ = small
    inputs = {spec.name: feed[spec.source_name or spec.name] for spec in model.inputs}
    got = th.build(model, "all:cpu", ["cpu"]).run(inputs)
    want = onnx_reference(proto, feed)
    assert got[0].shape == (32, 1)
    assert max_relative_error(got, want) < 1e-4


def test_cap_moves_the_tables_off_the_gpu(small):
    _, _, _, devices, layers = small
    tables = _tables(layers)
    assert len(tables) == 4 and all(t.name.startswith("take_") for t in tables)
    # all on cuda: four tables of 125 KiB do not fit 100 KiB; cpu alone does
    assert not fits(layers, th.Placement.all_on(layers, "cuda"), devices)
    assert [p.devices_used for p in candidates.single_device(layers, devices)] == [["cpu"]]
    # everything on cuda, then the largest parameters off it until it fits: the four tables
    placement = candidates.repair(th.Placement.all_on(layers, "cuda"), layers, devices)
    assert {n for n, d in placement.assignment.items() if d == "cpu"} == {t.name for t in tables}
    assert all(placement[layer.name] == "cuda" for layer in layers if layer.kind == "matmul")
    assert fits(layers, placement, devices)
    assert memory_use(layers, placement)["cuda"].total <= devices["cuda"].memory_cap


def test_split_builds_for_sm_90_with_gpu_rules(small):
    _, _, model, devices, layers = small
    placement = th.Placement({layer.name: "cpu" if layer.name.startswith(BAG_PREFIXES)
                              else "cuda" for layer in layers})
    assert fits(layers, placement, devices)
    compiled = th.build(model, placement, devices)  # compile-only: no GPU needed for sm_90
    on_cuda = _cuda_rules(compiled, layers, placement)
    assert {layer.name for layer in layers if layer.kind == "matmul"} <= set(on_cuda)
    for layer in layers:
        if layer.name in on_cuda:
            allowed = {rule.name for rule in default_table().rules_for("cuda", layer.kind)}
            assert on_cuda[layer.name] in allowed, (layer.name, on_cuda[layer.name])
            if layer.kind == "matmul":  # a matrix product as a GEMM or GEMV, not one thread
                assert on_cuda[layer.name] not in ("dlight.gpu.Fallback",
                                                   "dlight.gpu.GeneralReduction")
    lib = [m for key, m in compiled.libs.items() if '"cuda"' in key][0]
    assert lib.imports and lib.imports[0].kind == "cuda"  # the GPU kernels, as CUDA


def test_index_checks_placed_on_the_gpu_run_on_the_cpu(small):
    _, _, model, devices, layers = small
    # the cap's own placement: only the tables moved, their index checks left on cuda
    placement = candidates.repair(th.Placement.all_on(layers, "cuda"), layers, devices)
    checks = [layer.name for layer in layers if layer.name.startswith("index_guard_")]
    assert checks and all(placement[name] == "cuda" for name in checks)
    compiled = th.build(model, placement, devices)
    # the check (an assert raised as the VM call's error) runs on the host: the CUDA module
    # has no such kernel, and the executable's placement says where it ran
    assert all(compiled.placement[name] == "cpu" for name in checks)
    cuda_source = "".join(imported.inspect_source() for lib in compiled.libs.values()
                          for imported in lib.imports if imported.kind == "cuda")
    assert "__global__" in cuda_source and "index_guard" not in cuda_source


def test_index_checks_of_a_set_without_a_cpu_run_on_the_host(small):
    _, feed, model, _, layers = small
    compiled = th.build(model, th.Placement.all_on(layers, "cuda"), [CUDA])
    assert compiled.devices.names == ["cuda", "cpu"]  # the host CPU joins for the checks
    checks = [layer.name for layer in layers if layer.name.startswith("index_guard_")]
    assert checks and all(compiled.placement[name] == "cpu" for name in checks)
    assert all(compiled.placement[layer.name] == "cuda" for layer in layers
               if layer.name not in checks)
