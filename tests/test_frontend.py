import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tvm_hetero as th
from tvm_hetero.testing import light_model_path


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
    torch = pytest.importorskip("torch", reason="PyTorch is an optional dependency")

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
