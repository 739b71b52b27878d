"""Compiled gathers and scatters never read or write outside their buffers:
an out-of-range index raises InputError (exit 2 from `tvm-hetero run`), a negative one wraps
once as ONNX says. A property test feeds random and adversarial indices to each op and checks
the in-range answers against onnxruntime."""

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import tvm_hetero as th
from tvm_hetero.cli.main import main
from tvm_hetero.testing import onnx_reference, random_placement

INT64 = np.iinfo(np.int64)
F, I = TensorProto.FLOAT, TensorProto.INT64


def _model(node, inputs, output, inits=()):
    graph = helper.make_graph([node], node.op_type, inputs, [output], initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


# op -> (model, the data input's shape, the indices' shape, the bound of each index column)
CASES = {
    "Gather": (_model(helper.make_node("Gather", ["data", "idx"], ["y"], axis=1),
                      [_vi("data", F, [3, 5]), _vi("idx", I, [2, 2])], _vi("y", F, None)),
               (2, 2), [5]),
    "GatherElements": (_model(helper.make_node("GatherElements", ["data", "idx"], ["y"], axis=0),
                              [_vi("data", F, [3, 5]), _vi("idx", I, [2, 5])],
                              _vi("y", F, None)), (2, 5), [3]),
    "GatherND": (_model(helper.make_node("GatherND", ["data", "idx"], ["y"]),
                        [_vi("data", F, [3, 5]), _vi("idx", I, [4, 2])], _vi("y", F, None)),
                 (4, 2), [3, 5]),
    "ScatterElements": (_model(helper.make_node("ScatterElements", ["data", "idx", "upd"], ["y"],
                                                axis=1, reduction="add"),
                               [_vi("data", F, [3, 5]), _vi("idx", I, [3, 2]),
                                _vi("upd", F, [3, 2])], _vi("y", F, None)), (3, 2), [5]),
    "ScatterND": (_model(helper.make_node("ScatterND", ["data", "idx", "upd"], ["y"],
                                          reduction="add"),
                         [_vi("data", F, [3, 5]), _vi("idx", I, [4, 2]), _vi("upd", F, [4])],
                         _vi("y", F, None)), (4, 2), [3, 5]),
    "OneHot": (_model(helper.make_node("OneHot", ["idx", "depth", "values"], ["y"], axis=-1),
                      [_vi("idx", I, [6])], _vi("y", F, None),
                      [helper.make_tensor("depth", I, [], [4]),
                       helper.make_tensor("values", F, [2], [0.0, 1.0])]), (6,), [4]),
}
_BUILT = {}


def compiled(op):
    if op not in _BUILT:
        proto = CASES[op][0]
        model = th.load_model(proto, name=op)
        layers = th.extract_layers(model)
        placement = random_placement(layers, ["cpu", "cpu-generic"], np.random.default_rng(1))
        _BUILT[op] = (model, th.build(model, placement, ["cpu", "cpu-generic"]))
    return _BUILT[op]


def feed(op, indices):
    model, build = compiled(op)
    rng = np.random.default_rng(0)
    inputs = {s.name: s.random(rng) for s in model.inputs}
    idx_name = next(s.name for s in model.inputs if s.source_name == "idx")
    inputs[idx_name] = indices
    return model, build, inputs


def index_arrays(op):
    """Indices of the op's shape: mostly near the valid range, some adversarial extremes."""
    shape, bounds = CASES[op][1], CASES[op][2]
    edge = max(bounds)
    values = st.one_of(st.integers(-edge - 2, edge + 1),
                       st.sampled_from([INT64.min, INT64.max, -2 ** 31, 2 ** 31, 2 ** 40]))
    count = int(np.prod(shape))
    return st.lists(values, min_size=count, max_size=count).map(
        lambda v: np.array(v, dtype=np.int64).reshape(shape))


def in_range(op, indices):
    bounds = np.array(CASES[op][2])
    cols = indices.reshape(-1, len(bounds)) if len(bounds) > 1 else indices.reshape(-1, 1)
    return bool(((cols >= -bounds) & (cols < bounds)).all())


@pytest.mark.parametrize("op", sorted(CASES))
def test_random_and_adversarial_indices(op):
    @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
    @given(indices=index_arrays(op))
    def check(indices):
        model, build, inputs = feed(op, indices)
        if op == "OneHot":  # ONNX: an index out of [-depth, depth) gives a row of off values
            got = build.run(inputs)[0]
            wrapped = np.where(indices < 0, indices + 4, indices)
            want = (wrapped[:, None] == np.arange(4)[None, :]).astype(np.float32)
            np.testing.assert_array_equal(got, want)
            return
        if in_range(op, indices):
            got = build.run(inputs)
            want = onnx_reference(CASES[op][0], inputs, model)
            np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
        else:
            with pytest.raises(th.InputError, match=f"out-of-range index.*{op}"):
                build.run(inputs)

    check()


def test_negative_indices_wrap_once():
    _, build, inputs = feed("Gather", np.array([[-1, -5], [0, 4]], dtype=np.int64))
    data = inputs[next(k for k in inputs if k != "idx")]
    got = build.run(inputs)[0]
    np.testing.assert_array_equal(got, data[:, [[4, 0], [0, 4]]])
    _, build, inputs = feed("Gather", np.array([[-6, 0], [0, 0]], dtype=np.int64))
    with pytest.raises(th.InputError):
        build.run(inputs)


def test_embedding_lookup_past_the_vocabulary_is_one_error_line_from_run(tmp_path, capsys):
    table = np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32)
    proto = _model(helper.make_node("Gather", ["table", "ids"], ["emb"]),
                   [_vi("ids", I, [1, 6])], _vi("emb", F, [1, 6, 8]),
                   [onnx.numpy_helper.from_array(table, "table")])
    model = th.load_model(proto, name="embedding")
    layers = th.extract_layers(model)
    build = th.build(model, th.Placement({l.name: "cpu" for l in layers}), ["cpu"])
    lib = build.export_library(tmp_path / "emb.so")
    ids = np.array([[1, 2, 3, 49, -50, 0]], dtype=np.int64)
    np.testing.assert_array_equal(build.run([ids])[0], table[ids % 50])
    np.savez(tmp_path / "bad.npz", **{model.inputs[0].name: np.array([[1, 2, 3, 50, 0, 0]])})
    code = main(["run", str(lib), "-d", "cpu", "--inputs", str(tmp_path / "bad.npz")])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("Error: out-of-range index") and "Gather" in lines[0]


@pytest.mark.parametrize("op", sorted(CASES))
def test_every_kernel_of_a_checked_model_can_be_profiled(op):
    # kernels are timed alone on random arguments: an index check's bounds must hold them
    model = th.load_model(CASES[op][0], name=op)
    layers = th.extract_layers(model)
    profile = th.profile_model(model, layers, th.DeviceSet.parse(["cpu"]))
    assert all(profile.layer_ms[layer.name]["cpu"] > 0 for layer in layers)
