"""Layers (``tvm_hetero/layers/``): one fused group is one layer, its numbers, the layers of a
residual network as a DAG, a transformer block's, names stable across processes, the onnx
package's ResNet-50, the layers table and JSON."""

import subprocess
import sys

import numpy as np

import tvm_hetero as th
from tvm_hetero.layers.classify import LAYER_KINDS

from tests.helpers.models import light, zoo, zoo_direct


def test_a_fused_group_is_one_layer():
    layers = th.extract_layers(zoo_direct("cnn"))
    assert [(l.name, l.op_kinds) for l in layers] == [
        ("conv2d_0", ["conv2d", "add", "relu"]),  # conv + bias + relu: one layer, not three
        ("max_pool2d_0", ["max_pool2d"]),
        ("conv2d_1", ["conv2d", "add", "relu"]),
        ("max_pool2d_1", ["max_pool2d"]),
        ("reshape_0", ["reshape"]),
        ("matmul_0", ["matmul", "add"]),
    ]
    assert [l.kind for l in layers] == ["conv2d", "pooling", "conv2d", "pooling", "elementwise",
                                        "matmul"]
    assert all(l.kind in LAYER_KINDS for l in layers)


def test_layer_configuration_numbers():
    # zoo:mlp is 8x256 -> Gemm(512)+Relu -> Gemm(256)+Relu -> Gemm(10), float32
    first, second, last = th.extract_layers(zoo("mlp").mod)
    # weights 256x512 and bias 512, 4 bytes each
    assert first.param_bytes == (256 * 512 + 512) * 4
    assert first.activation_bytes_in == 8 * 256 * 4
    assert first.activation_bytes_out == 8 * 512 * 4
    assert first.inputs[0].shape == (8, 256) and first.outputs[0].shape == (8, 512)
    # matmul: 2*M*K*N multiply-adds; plus one add (bias) and one max (relu) per output
    assert first.flops == 2 * 8 * 256 * 512 + 2 * 8 * 512
    assert last.flops == 2 * 8 * 256 * 10 + 8 * 10
    assert second.predecessors == [first.name] and first.model_inputs == ["input"]


def test_residual_and_concat_form_a_dag():
    layers = {l.name: l for l in th.extract_layers(zoo("resnet").mod)}
    # the first residual block: conv2d_2 adds the block input (conv2d_0's output, which the
    # stem writes in the blocked layout) to its own
    assert layers["conv2d_2"].op_kinds == ["conv2d", "add", "add", "relu"]
    assert set(layers["conv2d_2"].predecessors) == {"conv2d_1", "conv2d_0"}
    # the stem reads the image's 3 channels as one block: the transform into that block is a
    # form kernel of the stem (no layer of its own: tvm_hetero.prepare.device_forms)
    assert layers["conv2d_0"].predecessors == [] and layers["conv2d_0"].model_inputs == ["input"]
    assert layers["conv2d_0"].inputs[0].shape == (1, 1, 32, 32, 3)
    assert not any(name.startswith("te_layout_transform") for name in layers)
    # the two 1x1 branches joined by Concat are one convolution (see the test below)
    assert layers["conv2d_8"].predecessors == ["conv2d_7"]
    assert layers["mean_0"].predecessors == ["conv2d_8"]
    names = list(layers)
    for index, layer in enumerate(layers.values()):  # program order is a topological order
        assert all(names.index(p) < index for p in layer.predecessors)


def test_transformer_block_layers():
    layers = th.extract_layers(zoo("transformer").mod)
    kinds = {l.kind for l in layers}
    assert {"matmul", "normalization", "elementwise"} <= kinds
    assert sum(l.op_kinds[0] == "softmax" for l in layers) == 1
    assert sum(l.op_kinds[0] == "layer_norm" for l in layers) == 2


_NAMES_SCRIPT = """
import tvm_hetero as th
print(",".join(l.name for l in th.extract_layers(th.load_model("zoo:resnet").mod)))
"""


def test_layer_names_are_stable_across_processes():
    runs = [subprocess.run([sys.executable, "-c", _NAMES_SCRIPT], capture_output=True, text=True,
                           check=True).stdout.strip() for _ in range(2)]
    here = ",".join(l.name for l in th.extract_layers(zoo("resnet").mod))
    assert runs[0] == runs[1] == here


def test_resnet50_from_the_onnx_package_has_50_to_70_layers():
    layers = th.extract_layers(light("resnet50"))
    assert 50 <= len(layers) <= 70, len(layers)
    convs = [l for l in layers if l.kind == "conv2d"]
    assert len(convs) == 53  # every Conv of ResNet-50 with its batch norm (and residual add)
    # the residual add and relu are fused into the conv of the branch: 16 blocks
    assert sum(l.op_kinds[-2:] == ["add", "relu"] and l.op_kinds.count("add") == 2
               for l in convs) == 16
    assert sum(l.param_bytes for l in layers) > 90e6  # ~25.5M float32 parameters


def test_layers_table_and_json():
    layers = th.extract_layers(zoo("mlp").mod)
    from tvm_hetero.layers.table import layers_table

    table = layers_table(layers)
    assert "matmul_0" in table and "3 layers" in table
    data = layers[0].to_json()
    assert data["activation_bytes_out"] == 8 * 512 * 4 and data["outputs"][0]["shape"] == [8, 512]
    assert np.isfinite(data["flops"])
