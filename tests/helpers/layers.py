"""Hand-made layers for the search's and profiles' arithmetic (no model)."""

from tvm_hetero.layers.extract import Layer, TensorInfo


def layer(name, params, act_in, act_out, flops=0.0, preds=(), index=0):
    """A layer whose activations are uint8 vectors: bytes are the numbers given."""
    return Layer(name, "other", ["op"], name, [TensorInfo((act_in,), "uint8")],
                 [TensorInfo((act_out,), "uint8")], flops, params, list(preds), [], index)
