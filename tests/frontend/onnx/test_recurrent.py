"""ONNX's recurrent layers (tvm_hetero/frontend/onnx/recurrent.py: LSTM, GRU, RNN, which TVM
0.27's importer does not convert): the onnx package's 18 recurrent node cases through the
tool's path, and the options those cases leave out checked against onnxruntime."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_hetero as th
from tvm_hetero.optimize.pass_ import STRICT_RULES_ENV
from tvm_hetero.testing import run_onnx_node_case

NODE_CASES = [
    f"test_{op}_{case}" for op in ("lstm", "gru")
    for case in ("defaults", "with_initial_bias", "batchwise", "reverse", "bidirectional")
] + ["test_lstm_with_peepholes", "test_gru_seq_length", "test_rnn_seq_length"] + [
    f"test_simple_rnn_{case}"
    for case in ("defaults", "with_initial_bias", "batchwise", "reverse", "bidirectional")]


@pytest.fixture(autouse=True)
def strict_rules(monkeypatch):
    """A rule that raises on a recurrent step's kernel fails the build (not a logged retry)."""
    monkeypatch.setenv(STRICT_RULES_ENV, "1")


@pytest.mark.parametrize("name", NODE_CASES)
def test_node_case_matches_its_reference(name):
    _, _, got, want = run_onnx_node_case(name)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def recurrent_model(op_type, *, hidden=5, features=4, seq=6, batch=3, direction="forward",
                    sequence_lens=None, initial_state=False, peepholes=False, seed=0, **attrs):
    """One recurrent node with random weights; (model, inputs)."""
    rng = np.random.default_rng(seed)
    directions = 2 if direction == "bidirectional" else 1
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op_type]

    def weight(name, shape, scale=0.5):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32),
                                       name)

    initializers = [weight("W", [directions, gates * hidden, features]),
                    weight("R", [directions, gates * hidden, hidden]),
                    weight("B", [directions, 2 * gates * hidden])]
    feeds = {"X": rng.standard_normal([seq, batch, features]).astype(np.float32)}
    names = ["X", "W", "R", "B", ""]
    if sequence_lens is not None:
        names[4] = "L"
        feeds["L"] = np.array(sequence_lens, np.int32)
    if initial_state:
        for name in ["H0", "C0"][:2 if op_type == "LSTM" else 1]:
            names.append(name)
            feeds[name] = rng.standard_normal([directions, batch, hidden]).astype(np.float32)
    if peepholes:
        names += [""] * (7 - len(names)) + ["P"]
        initializers.append(weight("P", [directions, 3 * hidden], 1.0))
    while names[-1] == "":
        names.pop()
    types = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32}
    graph_inputs = [helper.make_tensor_value_info(k, types[v.dtype], v.shape)
                    for k, v in feeds.items()]
    outputs = ["Y", "Y_h", "Y_c"][:3 if op_type == "LSTM" else 2]
    node = helper.make_node(op_type, names, outputs, hidden_size=hidden, direction=direction,
                            **attrs)
    graph = helper.make_graph(
        [node], op_type, graph_inputs,
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), feeds


ORT_CASES = {
    "lstm_bidirectional_lengths_peepholes": (
        "LSTM", dict(direction="bidirectional", sequence_lens=[6, 3, 1], initial_state=True,
                     peepholes=True)),
    "lstm_clip_input_forget": ("LSTM", dict(initial_state=True, clip=0.5, input_forget=1)),
    "lstm_activations": ("LSTM", dict(
        direction="bidirectional",
        activations=["HardSigmoid", "LeakyRelu", "Elu", "ScaledTanh", "Softsign",
                     "ThresholdedRelu"],
        activation_alpha=[0.3, 0.05, 0.7, 1.2, 0.9], activation_beta=[0.4, 0.8])),
    "gru_reverse_lengths_linear_before_reset": (
        "GRU", dict(direction="reverse", sequence_lens=[2, 6, 4], linear_before_reset=1,
                    initial_state=True)),
    "gru_bidirectional_lengths": ("GRU", dict(direction="bidirectional",
                                              sequence_lens=[5, 6, 0])),
    # one step: its input is the projection itself, not a split of it
    "gru_one_step_bidirectional": ("GRU", dict(seq=1, direction="bidirectional",
                                               sequence_lens=[1, 0, 1])),
    "rnn_relu_lengths": ("RNN", dict(activations=["Relu"], sequence_lens=[6, 0, 3])),
    "rnn_affine_softplus": ("RNN", dict(
        direction="bidirectional", activations=["Affine", "Softplus"], activation_alpha=[0.5],
        activation_beta=[0.1], initial_state=True)),
}


@pytest.mark.parametrize("case", ORT_CASES)
def test_options_match_onnxruntime(case):
    op_type, options = ORT_CASES[case]
    proto, feeds = recurrent_model(op_type, **options)
    want = ort.InferenceSession(proto.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    model = th.load_model(proto)
    got = th.build(model, "all:cpu", ["cpu"]).run(
        {s.name: feeds[s.source_name] for s in model.inputs})
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("options, message", [
    (dict(activations=["Swish"]), "unknown activation function Swish"),
    (dict(activations=["Tanh", "Tanh"]), "has 2 activations; it takes 1 per direction"),
])
def test_bad_activations_are_one_line_errors(options, message):
    proto, _ = recurrent_model("RNN", **options)
    with pytest.raises(th.ModelError, match=r"RNN \(node RNN_0\):? " + message) as err:
        th.load_model(proto)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("op_type", ["LSTM", "GRU", "RNN"])
def test_the_unrolled_steps_share_one_copy_of_the_weights(op_type):
    """Every step reads the same constants: GRU's per-step slices of R were folded into a
    copy per step (its suite model: 96 MB of constants for 4.5 MB of weights)."""
    import tvm

    from tvm_hetero.layers.layered import layered_module

    proto, _ = recurrent_model(op_type, hidden=16, seq=12, direction="bidirectional")
    weights = sum(numpy_helper.to_array(i).nbytes for i in proto.graph.initializer)
    constants = {}  # each constant object once
    for block in layered_module(th.load_model(proto))["main"].body.blocks:
        todo = [binding.value for binding in block.bindings]
        while todo:  # calls and the tuples of their arguments
            expr = todo.pop()
            if isinstance(expr, tvm.ir.GenericConst):
                constants[expr] = expr.value.numpy().nbytes
            todo.extend(getattr(expr, "args", ()))
            todo.extend(getattr(expr, "fields", ()))
    assert 0 < sum(constants.values()) <= 1.25 * weights
    # and a device holding every step counts them once
    layers = th.extract_layers(th.load_model(proto))
    use = th.memory_use(layers, th.Placement.all_on(layers, "cpu"))["cpu"]
    assert use.param_bytes == sum(constants.values())


@pytest.mark.parametrize("op_type, per_step", [("LSTM", 3), ("GRU", 3), ("RNN", 1)])
def test_a_step_takes_its_input_without_a_kernel_of_its_own(op_type, per_step):
    """The steps read their rows of the input projection from one split (GRU: its (z, r) and
    h columns apart): a slice per step was a kernel per step, and GRU's h columns another
    (12 steps: LSTM 53 -> 42 layers, GRU 65 -> 43, RNN 28 -> 17; the suite's LSTM ran 0.73x
    the time, its GRU 0.92x)."""
    proto, _ = recurrent_model(op_type, hidden=16, seq=12)
    layers = th.extract_layers(th.load_model(proto))
    assert len(layers) <= per_step * 12 + 8, [layer.name for layer in layers]
