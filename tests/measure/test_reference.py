"""The independent reference: what `tune` checks candidates against, and what `compile --verify`
checks a library against, shares no code with the rules under test.

A deliberately wrong rule (`test-zeros`: the reduction kernel writes zeros, on the `cpu`
device only) is added to a variant of the default table that the builds are given; with a
reference built by the same rules it would agree with itself."""

import functools
import logging
import sys

import cloudpickle
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_hetero as th
from tvm_hetero import api
from tvm_hetero.cli.main import main
from tvm_hetero.search.records import header_path
from tvm_hetero.devices import GENERIC_X86_MCPU
from tvm_hetero.measure import ErrorKind, LocalBuilder, LocalRunner, MeasureTask, Measurer, worker
from tvm_hetero.optimize import Rule, default_table
from tvm_hetero.search import tune
from tvm_hetero.measure.reference import DEFAULT_LOOPS, ONNXRUNTIME, reference_outputs

WEIGHT = np.random.default_rng(1).standard_normal((1, 10, 1, 1)).astype("float32")


class ZerosRule(Rule):
    """Wrong on purpose: the kernel's output is written as zeros (on `cpu`, not `cpu-generic`)."""

    name = "test-zeros"
    description = "writes zeros (a test's wrong rule)"
    kinds = ("reduction",)
    families = ("cpu",)

    def apply(self, func, target):
        import tvm_ffi
        from tvm import tirx

        if str(target.attrs.get("mcpu", "")) == GENERIC_X86_MCPU:
            return None
        out = func.params[-1].name

        def zero(store):
            if store.buffer.name != out:
                return store
            return tirx.BufferStore(store.buffer, tirx.const(0, store.buffer.dtype),
                                    store.indices)

        return tvm_ffi.structural_map(func, [(tirx.BufferStore, zero)])


def zeros_table():
    """The default table with the wrong rule tried first for CPU reductions."""
    return default_table().with_rule("cpu", "reduction", ZerosRule())


def build_with_zeros_rule(*args):
    """The builder workers' f_build: the real build, given the table with the wrong rule."""
    return worker.build_candidate(*args, rules=zeros_table())


@pytest.fixture
def workers_get_zeros_rule():
    """Builder workers can run `build_with_zeros_rule`: this module travels to them by value
    (the workers cannot import the tests)."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def reduce_model():
    """x [1, 10, 12, 12] * w, ReduceMax over the channels (keepdims), Sigmoid: two layers, a
    reduction and an elementwise one."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 10, 12, 12])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 12, 12])
    nodes = [helper.make_node("Mul", ["x", "w"], ["m"]),
             helper.make_node("ReduceMax", ["m"], ["r"], axes=[1], keepdims=1),
             helper.make_node("Sigmoid", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "reduce_max", [x], [y],
                              [numpy_helper.from_array(WEIGHT, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def expected(inputs):
    return [1 / (1 + np.exp(-(inputs["x"] * WEIGHT).max(axis=1, keepdims=True)))]


@pytest.fixture
def onnx_path(tmp_path):
    path = str(tmp_path / "reduce_max.onnx")
    onnx.save(reduce_model(), path)
    return path


@pytest.fixture(scope="module")
def devices():
    return th.DeviceSet.parse(["cpu", "cpu-generic"])


def relax_model():
    """The same model as a Relax IRModule (no ONNX source)."""
    return th.load_model(th.load_model(reduce_model()).mod, name="reduce_max_relax")


def the_rules_kernel(model, devices):
    """The kernel the wrong rule schedules in an all-`cpu` build."""
    rules = th.build(model, "all:cpu", devices, rules=zeros_table()).stats.rules
    (kernel,) = [k for k, rule in rules.items() if rule == ZerosRule.name]
    return kernel


def test_the_wrong_rule_computes_wrong_answers(devices):
    """The premise: built with the rules, `cpu` gives sigmoid(0) everywhere."""
    model = th.load_model(reduce_model())
    inputs = model.random_inputs(0)
    (wrong,) = th.build(model, "all:cpu", devices, rules=zeros_table()).run(inputs)
    np.testing.assert_allclose(wrong, 0.5)
    (right,) = th.build(model, "all:cpu-generic", devices, rules=zeros_table()).run(inputs)
    np.testing.assert_allclose(right, expected(inputs)[0], rtol=1e-5)


def test_the_reference_is_onnxruntime_for_onnx_and_the_no_rules_build_for_relax(
        devices, tmp_path):
    model = th.load_model(reduce_model())
    inputs = model.random_inputs(0)
    ort = reference_outputs(model, devices, inputs)
    assert ort.kind == ONNXRUNTIME and ort.label == "onnxruntime"
    assert ort.detail.startswith("onnxruntime ")  # its version
    np.testing.assert_allclose(ort.outputs[0], expected(inputs)[0], rtol=1e-5)

    relax = relax_model()
    loops = reference_outputs(relax, devices, inputs)
    assert loops.kind == DEFAULT_LOOPS and loops.label == "TVM's default loops on cpu"
    assert loops.detail == "not an ONNX model"
    np.testing.assert_allclose(loops.outputs[0], expected(inputs)[0], rtol=1e-5)

    # the tasks `tune` measures against
    task = MeasureTask.create(model, devices, str(tmp_path / "onnx"))
    assert task.reference_source == "onnxruntime"
    np.testing.assert_allclose(task.reference[0], expected(inputs)[0], rtol=1e-5)
    task = MeasureTask.create(relax, devices, str(tmp_path / "relax"))
    assert task.reference_source == "TVM's default loops on cpu"
    np.testing.assert_allclose(task.reference[0], expected(inputs)[0], rtol=1e-5)


def test_a_model_onnxruntime_refuses_falls_back_to_the_no_rules_build(devices, monkeypatch,
                                                                       caplog):
    import onnxruntime

    def refuse(*args, **kwargs):
        raise RuntimeError("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an "
                           "implementation for ReduceMax(17)")

    monkeypatch.setattr(onnxruntime, "InferenceSession", refuse)
    model = th.load_model(reduce_model())
    inputs = model.random_inputs(0)
    with caplog.at_level(logging.WARNING, logger="tvm_hetero.measure.reference"):
        reference = reference_outputs(model, devices, inputs)
    assert reference.kind == DEFAULT_LOOPS
    assert reference.detail.startswith("onnxruntime refused the model: ")
    assert "NOT_IMPLEMENTED" in reference.detail
    assert any("instead of onnxruntime" in r.message and "NOT_IMPLEMENTED" in r.message
               for r in caplog.records)
    np.testing.assert_allclose(reference.outputs[0], expected(inputs)[0], rtol=1e-5)


def test_compile_verify_names_the_kernel_and_its_rule(devices, onnx_path, tmp_path, capsys,
                                                      monkeypatch):
    kernel = the_rules_kernel(th.load_model(onnx_path), devices)
    lib = tmp_path / "model.so"
    compile_model = api.compile_model
    # the command line has no table of its own: its compile is given the one with the wrong rule
    monkeypatch.setattr(api, "compile_model",
                        functools.partial(compile_model, rules=zeros_table()))
    code = main(["compile", onnx_path, "-d", "cpu", "-d", "cpu-generic", "-p", "all:cpu",
                 "-o", str(lib), "--verify"])
    _, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0 and len(lines) == 1, err
    assert lines[0].startswith("Error: verification failed: output 0 differs from onnxruntime "
                               "by "), lines[0]
    assert "(tolerance 1e-4)" in lines[0]
    assert lines[0].endswith(f"kernel {kernel} (rule test-zeros) disagrees with TVM's default "
                             "loops"), lines[0]
    assert not lib.exists()  # a library known to be wrong is not left behind

    # a Relax module: checked against the no-rules build, the same culprit
    with pytest.raises(th.VerificationError, match=r"output 0 differs from TVM's default loops "
                       rf"on cpu by \d+%.*kernel {kernel} \(rule test-zeros\)"):
        compile_model(relax_model(), devices, str(lib), placement="all:cpu", verify=True,
                      rules=zeros_table())

    # where the rule declines (the reduction on cpu-generic), the library verifies
    layers = th.extract_layers(th.load_model(onnx_path))
    placement = th.Placement({layer.name: "cpu-generic" if layer.kind == "reduction" else "cpu"
                              for layer in layers})
    result = compile_model(onnx_path, devices, str(lib), placement=placement, verify=True,
                           rules=zeros_table())
    assert result.verification.reference.kind == ONNXRUNTIME
    assert result.verification.max_error < 1e-4
    assert result.to_json()["verified"]["reference"].startswith("onnxruntime")
    assert lib.exists()


def test_compile_verify_passes_with_the_default_rules(onnx_path, tmp_path, capsys):
    lib = tmp_path / "model.so"
    code = main(["compile", onnx_path, "-d", "cpu", "-p", "all:cpu", "-o", str(lib),
                 "--verify"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "verified against onnxruntime" in out and lib.exists()


def test_tune_marks_candidates_using_the_wrong_rule_as_wrong_output(workers_get_zeros_rule,
                                                                    devices, onnx_path, tmp_path):
    """Built in worker processes (given the table with the rule) and checked against
    onnxruntime: the candidates whose reduction runs on `cpu` are wrong output; with a
    reference built by the same rules on `cpu` they would pass and the others fail."""
    task = MeasureTask.create(onnx_path, devices, str(tmp_path / "task"))
    assert task.reference_source == "onnxruntime"
    (reduction,) = [layer.name for layer in task.layers if layer.kind == "reduction"]
    placements = [th.Placement.all_on(task.layers, "cpu"),
                  th.Placement.all_on(task.layers, "cpu-generic")]
    for device in ("cpu", "cpu-generic"):
        other = "cpu" if device == "cpu-generic" else "cpu-generic"
        placements.append(th.Placement({layer.name: device if layer.name == reduction
                                        else other for layer in task.layers}))
    measurer = Measurer(task, LocalBuilder(n_parallel=1, f_build=build_with_zeros_rule),
                        LocalRunner(repeat=1, min_repeat_ms=1))
    results = measurer.measure(placements)
    wrong = [p.assignment[reduction] == "cpu" for p in placements]
    assert wrong == [True, False, True, False]
    for is_wrong, result in zip(wrong, results):
        if is_wrong:
            assert result.error == ErrorKind.WRONG_ANSWER, result
            assert result.message.startswith("outputs differ from onnxruntime: relative error")
            assert result.max_error > 0.1
        else:
            assert result.ok and result.max_error < 1e-4, result


def test_tune_names_the_device_whose_every_candidate_disagrees(workers_get_zeros_rule, onnx_path,
                                                               tmp_path, monkeypatch, caplog):
    import json

    import tvm_hetero.measure

    monkeypatch.setattr(tvm_hetero.measure, "LocalBuilder",
                        functools.partial(LocalBuilder, f_build=build_with_zeros_rule))
    records = str(tmp_path / "records.jsonl")
    with caplog.at_level(logging.WARNING, logger="tvm_hetero.search.tune"):
        with pytest.raises(th.HeteroError) as info:
            api.tune_placement(onnx_path, ["cpu"], records, str(tmp_path / "p.json"), trials=1,
                               strategy="exhaustive", retime=0)
    message = str(info.value)
    assert "no candidate ran correctly (1 tried; every candidate using cpu (1) computed " \
           "outputs that differ from onnxruntime)" in message
    assert "compile --verify -p all:cpu" in message
    assert any("every candidate using cpu" in r.message for r in caplog.records)
    with open(header_path(records), encoding="utf-8") as handle:
        header = json.load(handle)
    assert header["reference"] == "onnxruntime"
    assert header["reference_detail"].startswith("onnxruntime ")

    # the search itself, on both devices: cpu-generic alone is right, the winner
    result = tune(onnx_path, ["cpu", "cpu-generic"], trials=4, strategy="exhaustive",
                  workdir=str(tmp_path / "both"), retime=0,
                  builder=LocalBuilder(n_parallel=1, f_build=build_with_zeros_rule),
                  runner=LocalRunner(repeat=1, min_repeat_ms=1))
    assert result.reference == "onnxruntime"
    assert result.placement is not None
    reduction = [layer.name for layer in th.extract_layers(th.load_model(onnx_path))
                 if layer.kind == "reduction"][0]
    assert result.placement.assignment[reduction] == "cpu-generic"
    assert {t.result.error for t in result.trials
            if t.placement.assignment[reduction] == "cpu"} == {ErrorKind.WRONG_ANSWER}
    assert result.wrong_output_devices == {}  # cpu also ran right where the reduction did not


def test_the_reference_is_the_graph_as_written():
    # generated graph 20222, reduced: onnxruntime 1.32 with its graph optimizations answers
    # Transpose then MatMul by a vector wrong (14.8 off for values of a few units); numpy,
    # onnxruntime without them and our build agree
    from tvm_hetero.testing import onnx_reference
    from tvm_hetero.testing.fuzz.outcomes import onnxruntime_outputs
    from tvm_hetero.measure.reference import reference_outputs

    rng = np.random.default_rng(0)
    weight = rng.standard_normal(20).astype("float32")
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 1, 3, 2]),
         helper.make_node("MatMul", ["t", "w"], ["y"])], "transpose_matvec",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 7, 20, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 7, 6])],
        [numpy_helper.from_array(weight, "w")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((2, 7, 20, 6)).astype("float32")
    want = np.matmul(x.transpose(0, 1, 3, 2), weight)
    model = th.load_model(proto, name="transpose_matvec")
    devices = th.DeviceSet.parse(["cpu"])
    reference = reference_outputs(model, devices, {"x": x})
    assert reference.label == "onnxruntime"
    for outputs in (reference.outputs, onnx_reference(proto, {"x": x}),
                    onnxruntime_outputs(proto, {"x": x}),
                    th.build(model, "all:cpu", devices).run({"x": x})):
        np.testing.assert_allclose(outputs[0], want, rtol=1e-5, atol=1e-5)
