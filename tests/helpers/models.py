"""Models the tests share, loaded or prepared once per process, and small graphs built by
code."""

import numpy as np

import tvm_hetero as th

_MODELS = {}


def zoo(name):
    if name not in _MODELS:
        _MODELS[name] = th.load_model(f"zoo:{name}")
    return _MODELS[name]


_LIGHT_MODELS = {}


def light(name):
    """A light graph of the onnx package (seeded weights) loaded once per session: its layered
    modules are cached on it per preparation, so the tests that read its layers or build it
    share one preparation (ResNet-50's takes 10 s)."""
    from tvm_hetero.testing import light_model

    if name not in _LIGHT_MODELS:
        _LIGHT_MODELS[name] = th.load_model(light_model(name), name=name)
    return _LIGHT_MODELS[name]


_DIRECT_MODELS = {}


def zoo_direct(name):
    """A zoo model prepared without Winograd (``PrepareConfig(winograd=False)``): its 3x3
    convolutions stay direct and NCHW (the direct rules' tests). Its module is the layered one,
    which every flow takes as it is."""
    if name not in _DIRECT_MODELS:
        _DIRECT_MODELS[name] = prepared(th.load_model(f"zoo:{name}"),
                                        th.PrepareConfig.for_host(winograd=False))
    return _DIRECT_MODELS[name]


def prepared(model, config):
    """`model` with its module prepared under `config` (a layered module: flows take it as it
    is, whatever their devices)."""
    import dataclasses

    return dataclasses.replace(model, mod=th.prepare(model.mod, config), onnx_model=None,
                               _fingerprint=None, _layered=None)


def conv_chain(channels: int, size: int):
    """3x3 conv with bias and relu, then a strided 1x1 conv with a residual (ResNet's
    downsample shape)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(4)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                      [1, 2 * channels, size // 2, size // 2])
    inits = [numpy_helper.from_array(rng.standard_normal(shape).astype("float32") * 0.1, name)
             for name, shape in [("w1", (channels, channels, 3, 3)), ("b1", (channels,)),
                                 ("w2", (2 * channels, channels, 1, 1)),
                                 ("r", (1, 2 * channels, size // 2, size // 2))]]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["a1"]),
             helper.make_node("Conv", ["a1", "w2"], ["c2"], strides=[2, 2]),
             helper.make_node("Add", ["c2", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    graph = helper.make_graph(nodes, "conv_chain", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def conv1x1_residual_onnx(stride: int):
    """An ONNX 1x1 convolution (16 -> 32 channels, `stride`) with a residual add and ReLU."""
    from onnx import TensorProto, helper, numpy_helper

    size = 8 // stride
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])
    r = helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 32, size, size])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, size, size])
    weight = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((32, 16, 1, 1)).astype("float32"), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], strides=[stride, stride]),
             helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    graph = helper.make_graph(nodes, "conv1x1_residual", [x, r], [y], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
