import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tvm_hetero as th
from tvm_hetero.testing import light_model_path

from tests.helpers.optional import import_torch


@pytest.mark.parametrize("name", sorted(th.ZOO))
def test_zoo_models_load_with_weights_bound(name):
    model = th.load_model(f"zoo:{name}")
    main = model.mod["main"]
    # weights are constants: main takes the model inputs only
    assert [p.name for p in main.params] == [s.name for s in model.inputs]
    assert all(all(d > 0 for d in s.shape) for s in model.inputs)
    assert model.onnx_model is not None


def test_onnx_path_and_model_proto_give_the_same_module(tmp_path):
    proto = th.zoo_model("cnn")
    path = tmp_path / "cnn.onnx"
    onnx.save(proto, path)
    from_path = th.load_model(str(path))
    from_proto = th.load_model(proto)
    assert from_path.name == "cnn"
    assert from_path.fingerprint() == from_proto.fingerprint()
    assert from_path.inputs == from_proto.inputs


def test_onnx_input_names_are_described():
    model = th.load_model(light_model_path("resnet50"))
    (spec,) = model.inputs  # the 269 initializers listed as inputs are weights, not inputs
    assert spec.source_name == "gpu_0/data_0" and spec.shape == (1, 3, 224, 224)
    assert spec.dtype == "float32"


def test_fingerprint_is_stable_and_distinguishes_models():
    assert th.load_model("zoo:mlp").fingerprint() == th.load_model("zoo:mlp").fingerprint()
    assert th.load_model("zoo:mlp").fingerprint() != th.load_model("zoo:cnn").fingerprint()


def test_relax_module_input():
    from tvm import relax

    x = relax.Var("x", relax.TensorType((4, 8), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.relu(x))
        bb.emit_func_output(y)
    model = th.load_model(bb.get())
    assert model.inputs == [th.InputSpec("x", (4, 8), "float32")]


def _dynamic_model():
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "dyn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_dynamic_shapes_need_a_static_shape():
    with pytest.raises(th.ModelError, match=r"input 'x' has a dynamic shape \['N', 4\]"):
        th.load_model(_dynamic_model())
    model = th.load_model(_dynamic_model(), input_shapes={"x": (2, 4)})
    assert model.inputs[0].shape == (2, 4)
    with pytest.raises(th.ModelError, match="unknown input"):
        th.load_model(_dynamic_model(), input_shapes={"x": (2, 4), "z": (1,)})


def test_unsupported_op_is_named():
    node = helper.make_node("DeformConv", ["x", "w", "o"], ["y"])
    graph = helper.make_graph(
        [node], "unsupported",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
         for n, s in [("x", [1, 1, 4, 4]), ("w", [1, 1, 1, 1]), ("o", [1, 2, 4, 4])]],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    with pytest.raises(th.ModelError, match="DeformConv"):
        th.load_model(model)


def test_missing_corrupt_and_unknown_sources(tmp_path):
    with pytest.raises(th.ModelError, match="not found"):
        th.load_model(str(tmp_path / "nope.onnx"))
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not a protobuf")
    with pytest.raises(th.ModelError, match="not a valid ONNX model"):
        th.load_model(str(bad))
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(th.zoo_model("cnn").SerializeToString()[:500])
    with pytest.raises(th.ModelError, match="not a valid ONNX model"):
        th.load_model(str(truncated))
    with pytest.raises(th.ModelError, match="unknown zoo model 'nope'"):
        th.load_model("zoo:nope")
    with pytest.raises(th.ModelError, match="cannot load a model from a builtins.int"):
        th.load_model(3)


def test_random_inputs_are_seeded():
    model = th.load_model("zoo:mlp")
    a, b = model.random_inputs(1), model.random_inputs(1)
    np.testing.assert_array_equal(a["input"], b["input"])


def test_torch_exported_program():
    torch = import_torch()

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(16, 32)
            self.fc2 = torch.nn.Linear(32, 4)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    net = Net().eval()
    example = torch.randn(2, 16)
    program = torch.export.export(net, (example,))
    model = th.load_model(program)
    assert model.inputs[0].shape == (2, 16)
    compiled = th.build(model, "all:cpu", ["cpu"])
    out = compiled.run([example.numpy()])
    np.testing.assert_allclose(out[0], net(example).detach().numpy(), rtol=1e-5, atol=1e-5)


def slash_named_model():
    """MatMul + Relu whose input is named like ResNet-50's (``gpu_0/data_0``), next to a
    tensor already called ``gpu_0_data_0``."""
    from onnx import numpy_helper

    rng = np.random.default_rng(3)
    x = helper.make_tensor_value_info("gpu_0/data_0", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
    weight = numpy_helper.from_array(rng.standard_normal((8, 8)).astype("float32"), "gpu_0/w")
    nodes = [helper.make_node("MatMul", ["gpu_0/data_0", "gpu_0/w"], ["gpu_0_data_0"]),
             helper.make_node("Relu", ["gpu_0_data_0"], ["y"])]
    graph = helper.make_graph(nodes, "slash", [x], [y], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_input_names_that_are_no_c_identifiers_compile_for_cuda():
    import re

    from tvm_hetero.testing import max_relative_error, onnx_reference

    onnx_model = slash_named_model()
    model = th.load_model(onnx_model, name="slash")
    (spec,) = model.inputs
    assert spec.source_name == "gpu_0/data_0"
    assert re.fullmatch(r"[A-Za-z_]\w*", spec.name) and spec.name != "gpu_0_data_0"
    assert onnx_model.graph.input[0].name == "gpu_0/data_0"  # the caller's model is unchanged
    compiled = th.build(model, "all:cuda", ["cpu", "cuda@sm_90"])
    cuda_lib = compiled.libs[str(compiled.devices["cuda"].tvm_target())]
    (cuda,) = [m for m in cuda_lib.imports if m.kind == "cuda"]
    kernel = r"__global__ void (?:__launch_bounds__\(\d+\) )?\w+\(([^)]*)\)"
    signatures = re.findall(kernel, cuda.inspect_source())
    params = [param.split()[-1] for sig in signatures for param in sig.split(",")]
    assert params and all(re.fullmatch(r"[A-Za-z_]\w*", p) for p in params), params
    # the source name still works for inputs, and the CPU build agrees with onnxruntime
    inputs = {"gpu_0/data_0": np.random.default_rng(0).standard_normal((1, 8)).astype("float32")}
    got = th.build(model, "all:cpu", ["cpu"]).run(inputs)
    assert max_relative_error(got, onnx_reference(onnx_model, inputs)) < 1e-5
