"""The suite's models, built by code with the onnx helper API (opset 17, seeded random
weights, nothing downloaded), the onnx package's light graphs with seeded weights, and
``SUITE``: model name -> function returning ``(onnx.ModelProto, inputs)``."""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto, helper

from ..models import light_model
from .graph import GraphBuilder, float_input, normal_array, strip_initializer_inputs


def mlp(batch: int):
    """Gemm+Relu 1024 -> 4096 -> 2048 -> 1000 (56 MB of weights)."""
    g = GraphBuilder()
    x = "x"
    widths = [1024, 4096, 2048, 1000]
    for i, (fin, fout) in enumerate(zip(widths, widths[1:])):
        x = g.gemm(x, fin, fout)
        if i < len(widths) - 2:
            x = g.op("Relu", [x])
    return (g.model(f"mlp_b{batch}", [float_input("x", [batch, 1024])], [x]),
            {"x": normal_array([batch, 1024])})


def wide_and_deep():
    """Batch 8: wide Gemms 4096 -> 2048 -> 512 (34 MB) beside a small conv tower on 3x32x32
    images, concatenated into a Gemm head with a Sigmoid."""
    g = GraphBuilder()
    wide = g.op("Relu", [g.gemm("dense", 4096, 2048)])
    wide = g.op("Relu", [g.gemm(wide, 2048, 512)])
    deep = g.op("Relu", [g.conv("image", 3, 16, 3)])
    deep = g.op("Relu", [g.conv(deep, 16, 32, 3, stride=2)])
    deep = g.op("Relu", [g.conv(deep, 32, 64, 3, stride=2)])
    deep = g.op("Flatten", [g.op("GlobalAveragePool", [deep])])
    both = g.op("Concat", [wide, deep], axis=1)
    out = g.op("Sigmoid", [g.gemm(g.op("Relu", [g.gemm(both, 576, 256)]), 256, 1)])
    inputs = [float_input("dense", [8, 4096]), float_input("image", [8, 3, 32, 32])]
    return g.model("wide_and_deep", inputs, [out]), {"dense": normal_array([8, 4096]),
                                                      "image": normal_array([8, 3, 32, 32], 2)}


def bert_layer(seq: int = 128, d: int = 768, heads: int = 12, vocab: int = 8192):
    """BERT-base-shaped: int64 token ids and attention mask, embedding Gather (a vocabulary of
    8192, not 30522, to keep the graph small), position embeddings, LayerNorm, one encoder layer
    (GELU through Erf, FFN 3072)."""
    g = GraphBuilder()
    table = g.const((g.rng.standard_normal([vocab, d]) * 0.02).astype(np.float32), "emb")
    x = g.op("Gather", [table, "input_ids"], axis=0)
    positions = g.const((g.rng.standard_normal([1, seq, d]) * 0.02).astype(np.float32), "pos")
    x = g.layer_norm(g.op("Add", [x, positions]), d)
    mask = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    mask = g.op("Mul", [g.op("Sub", [g.scalar(1.0), mask]), g.scalar(-10000.0)])
    mask = g.op("Unsqueeze", [mask, g.ints([1, 2])])  # [1, 1, 1, seq]
    out = g.encoder_layer(x, seq, d, heads, 4 * d, mask)
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, seq])]
    rng = np.random.default_rng(3)
    attention_mask = np.ones([1, seq], np.int64)
    attention_mask[:, seq - seq // 4:] = 0  # padded tail
    return g.model("bert_layer", inputs, [out]), {
        "input_ids": rng.integers(0, vocab, [1, seq]).astype(np.int64),
        "attention_mask": attention_mask}


def gpt2_block(seq: int = 128, d: int = 768, heads: int = 12):
    """Pre-norm decoder block: causal mask (additive constant), GELU through Tanh."""
    g = GraphBuilder()
    causal = np.triu(np.full([seq, seq], -1e9, np.float32), k=1)[None, None]
    attn = g.attention(g.layer_norm("x", d), seq, d, heads, g.const(causal, "causal"))
    x = g.op("Add", ["x", attn])
    hidden = g.gelu_tanh(g.linear(g.layer_norm(x, d), d, 4 * d))
    out = g.op("Add", [x, g.linear(hidden, 4 * d, d)])
    return (g.model("gpt2_block", [float_input("x", [1, seq, d])], [out]),
            {"x": normal_array([1, seq, d])})


def vit(d: int = 768, heads: int = 12, patch: int = 16):
    """ViT-B/16 shaped: 16x16 stride-16 patch Conv, class token, position embeddings, one
    encoder layer, LayerNorm, a 1000-class head on the class token."""
    g = GraphBuilder()
    tokens = (224 // patch) ** 2
    x = g.conv("image", 3, d, patch, stride=patch, pad=0)
    x = g.op("Transpose", [g.op("Reshape", [x, g.ints([1, d, tokens])])], perm=[0, 2, 1])
    cls = g.const((g.rng.standard_normal([1, 1, d]) * 0.02).astype(np.float32), "cls")
    x = g.op("Concat", [cls, x], axis=1)
    pos = g.const((g.rng.standard_normal([1, tokens + 1, d]) * 0.02).astype(np.float32), "pos")
    x = g.encoder_layer(g.op("Add", [x, pos]), tokens + 1, d, heads, 4 * d)
    first = g.op("Gather", [g.layer_norm(x, d), g.const(np.array(0, np.int64))], axis=1)
    out = g.gemm(first, d, 1000)
    return (g.model("vit", [float_input("image", [1, 3, 224, 224])], [out]),
            {"image": normal_array([1, 3, 224, 224])})


def mobilenet_v2():
    """Full-depth MobileNetV2 1.0 at 224x224 (batch norm folded into conv biases)."""
    g = GraphBuilder()
    x = g.relu6(g.conv("image", 3, 32, 3, stride=2))
    cin = 32
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = g.relu6(g.conv(x, cin, hidden, 1)) if t != 1 else x
            y = g.relu6(g.conv(y, hidden, hidden, 3, stride=stride, group=hidden))
            y = g.conv(y, hidden, c, 1)
            x = g.op("Add", [x, y]) if stride == 1 and cin == c else y
            cin = c
    x = g.relu6(g.conv(x, cin, 1280, 1))
    out = g.gemm(g.op("Flatten", [g.op("GlobalAveragePool", [x])]), 1280, 1000)
    return (g.model("mobilenet_v2", [float_input("image", [1, 3, 224, 224])], [out]),
            {"image": normal_array([1, 3, 224, 224])})


def _hardswish_block(g, x, cin, hidden, cout, k, stride):
    y = g.op("HardSwish", [g.conv(x, cin, hidden, 1)])
    y = g.op("HardSwish", [g.conv(y, hidden, hidden, k, stride=stride, group=hidden)])
    y = g.squeeze_excite(y, hidden, hidden // 4, gate="hard")
    y = g.conv(y, hidden, cout, 1)
    return g.op("Add", [x, y]) if stride == 1 and cin == cout else y


def mobilenet_v3_block():
    """MobileNetV3-Large's stage 5 on 1x40x28x28: HardSwish, depthwise 3x3 and 5x5,
    squeeze-and-excite with a HardSigmoid gate, three blocks."""
    g = GraphBuilder()
    x = _hardswish_block(g, "x", 40, 240, 80, 3, 2)
    x = _hardswish_block(g, x, 80, 200, 80, 3, 1)
    x = _hardswish_block(g, x, 80, 480, 112, 5, 1)
    return (g.model("mobilenet_v3_block", [float_input("x", [1, 40, 28, 28])], [x]),
            {"x": normal_array([1, 40, 28, 28])})


def efficientnet_block():
    """EfficientNet-B0's MBConv6 5x5 blocks on 1x40x28x28: SiLU, depthwise 5x5 (stride 2 then
    1), squeeze-and-excite with SiLU and a Sigmoid gate, residual."""
    g = GraphBuilder()
    x, cin = "x", 40
    for cout, stride in [(80, 2), (80, 1), (112, 1)]:
        hidden = cin * 6
        y = g.silu(g.conv(x, cin, hidden, 1))
        y = g.silu(g.conv(y, hidden, hidden, 5, stride=stride, group=hidden))
        y = g.squeeze_excite(y, hidden, max(cin // 4, 1), act="silu")
        y = g.conv(y, hidden, cout, 1)
        x = g.op("Add", [x, y]) if stride == 1 and cin == cout else y
        cin = cout
    return (g.model("efficientnet_block", [float_input("x", [1, 40, 28, 28])], [x]),
            {"x": normal_array([1, 40, 28, 28])})


def tcn():
    """1-D temporal conv net on 1x64x1024: a 1x1 input conv then four residual blocks of two
    dilated (1, 2, 4, 8) kernel-3 Conv1d + Relu, 128 channels; a 1x1 head."""
    g = GraphBuilder()
    x = g.conv("x", 64, 128, 1, dims=1)
    for dilation in (1, 2, 4, 8):
        y = g.op("Relu", [g.conv(x, 128, 128, 3, dilation=dilation, dims=1)])
        y = g.op("Relu", [g.conv(y, 128, 128, 3, dilation=dilation, dims=1)])
        x = g.op("Add", [x, y])
    out = g.conv(x, 128, 32, 1, dims=1)
    return (g.model("tcn", [float_input("x", [1, 64, 1024])], [out]),
            {"x": normal_array([1, 64, 1024])})


def unet():
    """Small U-Net on 1x3x128x128: two down levels (3x3 conv pairs, MaxPool), a bottleneck,
    nearest-neighbour Resize up, Concat skips, a 1x1 head."""
    g = GraphBuilder()

    def double(x, cin, cout):
        return g.op("Relu", [g.conv(g.op("Relu", [g.conv(x, cin, cout, 3)]), cout, cout, 3)])

    def up(x):
        return g.op("Resize", [x, "", g.const(np.array([1, 1, 2, 2], np.float32))],
                    mode="nearest")

    e1 = double("image", 3, 32)
    e2 = double(g.op("MaxPool", [e1], kernel_shape=[2, 2], strides=[2, 2]), 32, 64)
    b = double(g.op("MaxPool", [e2], kernel_shape=[2, 2], strides=[2, 2]), 64, 128)
    d2 = double(g.op("Concat", [up(b), e2], axis=1), 192, 64)
    d1 = double(g.op("Concat", [up(d2), e1], axis=1), 96, 32)
    out = g.conv(d1, 32, 2, 1)
    return (g.model("unet", [float_input("image", [1, 3, 128, 128])], [out]),
            {"image": normal_array([1, 3, 128, 128])})


def recurrent(op_type: str, seq: int = 32, features: int = 256, hidden: int = 512):
    """One LSTM or GRU layer over [seq 32, batch 1, 256], hidden 512, then its last output."""
    g = GraphBuilder()
    gates = 4 if op_type == "LSTM" else 3
    w = g.weight([1, gates * hidden, features], fan_in=features)
    r = g.weight([1, gates * hidden, hidden], fan_in=hidden)
    b = g.const((g.rng.standard_normal([1, 2 * gates * hidden]) * 0.05).astype(np.float32))
    outs = [g.name("y"), g.name("y_h")]
    g.nodes.append(helper.make_node(op_type, ["x", w, r, b], outs, hidden_size=hidden))
    return (g.model(op_type.lower(), [float_input("x", [seq, 1, features])], [outs[1]]),
            {"x": normal_array([seq, 1, features])})


def llama_decode(d: int = 1024, heads: int = 16, ffn: int = 2816, layers: int = 2,
                 past: int = 127):
    """A LLaMA-style decode step: batch 1, one token [1, 1, d]; per layer RMS norm through
    Pow / ReduceMean / Add eps / Sqrt / Div and a weight Mul, rotary embedding on q and k
    through Slice / Neg / Concat with cos/sin inputs, a KV cache of `past` positions per layer
    as inputs joined with the new K/V by Concat, softmax attention over `heads` heads, SwiGLU
    (x * Sigmoid(x) gate times up, then down); a final RMS norm. No embedding table or LM
    head: 2 layers are 101 MB of fp32 weights (d 1024, FFN 2816), far beyond the caches.
    Outputs the hidden state and each layer's new K and V ([1, heads, past + 1, d / heads])."""
    g = GraphBuilder(seed=7)
    dh = d // heads
    half = dh // 2

    def rms_norm(x):
        mean = g.op("ReduceMean", [g.op("Pow", [x, g.scalar(2.0)])], axes=[-1], keepdims=1)
        inv = g.op("Div", [g.scalar(1.0), g.op("Sqrt", [g.op("Add", [mean, g.scalar(1e-6)])])])
        scale = g.const((1.0 + g.rng.standard_normal(d) * 0.05).astype(np.float32), "rms")
        return g.op("Mul", [g.op("Mul", [x, inv]), scale])

    def matmul(x, fin, fout):
        return g.op("MatMul", [x, g.weight([fin, fout], fan_in=fin)])

    def heads_of(t):  # [1, 1, d] -> [1, heads, 1, dh]
        return g.op("Transpose", [g.op("Reshape", [t, g.ints([1, 1, heads, dh])])],
                    perm=[0, 2, 1, 3])

    def rotary(t):  # t * cos + rotate_half(t) * sin on [1, heads, 1, dh]
        first = g.op("Slice", [t, g.ints([0]), g.ints([half]), g.ints([3])])
        second = g.op("Slice", [t, g.ints([half]), g.ints([dh]), g.ints([3])])
        rotated = g.op("Concat", [g.op("Neg", [second]), first], axis=3)
        return g.op("Add", [g.op("Mul", [t, "cos"]), g.op("Mul", [rotated, "sin"])])

    x = "x"
    inputs = [float_input("x", [1, 1, d]), float_input("cos", [1, 1, 1, dh]),
              float_input("sin", [1, 1, 1, dh])]
    rng = np.random.default_rng(11)
    angles = past * 10000.0 ** (-np.arange(half) / half)
    angles = np.concatenate([angles, angles]).reshape(1, 1, 1, dh)
    feed = {"x": normal_array([1, 1, d], 5), "cos": np.cos(angles).astype(np.float32),
            "sin": np.sin(angles).astype(np.float32)}
    outputs = []
    for layer in range(layers):
        h = rms_norm(x)
        q = rotary(heads_of(matmul(h, d, d)))
        k = rotary(heads_of(matmul(h, d, d)))
        v = heads_of(matmul(h, d, d))
        past_k, past_v = f"past_key_{layer}", f"past_value_{layer}"
        inputs += [float_input(past_k, [1, heads, past, dh]),
                   float_input(past_v, [1, heads, past, dh])]
        feed[past_k] = rng.standard_normal([1, heads, past, dh]).astype(np.float32)
        feed[past_v] = rng.standard_normal([1, heads, past, dh]).astype(np.float32)
        keys = g.op("Concat", [past_k, k], axis=2)  # [1, heads, past + 1, dh]
        values = g.op("Concat", [past_v, v], axis=2)
        outputs += [keys, values]
        scores = g.op("MatMul", [q, g.op("Transpose", [keys], perm=[0, 1, 3, 2])])
        scores = g.op("Div", [scores, g.scalar(math.sqrt(dh))])
        context = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), values])
        context = g.op("Reshape", [g.op("Transpose", [context], perm=[0, 2, 1, 3]),
                                   g.ints([1, 1, d])])
        x = g.op("Add", [x, matmul(context, d, d)])
        h = rms_norm(x)
        gate = matmul(h, d, ffn)
        up = matmul(h, d, ffn)
        x = g.op("Add", [x, matmul(g.op("Mul", [g.silu(gate), up]), ffn, d)])
    out = rms_norm(x)
    return g.model("llama_decode", inputs, [out] + outputs), feed


def yolo_detector(size: int = 160, classes: int = 20, anchors: int = 3):
    """A small YOLO-style detector on 1x3xSIZExSIZE: SiLU convolutions (x * Sigmoid(x), the
    convolution's output read twice), stride-2 downsampling to strides 8, 16 and 32, residual
    blocks, an FPN neck (1x1 lateral convolutions, nearest Resize x2, Add), three heads each
    Conv -> Reshape [1, anchors, 5 + classes, cells] -> Transpose -> Sigmoid, joined by Concat
    into [1, anchors, cells over the three scales, 5 + classes]."""
    g = GraphBuilder(seed=9)

    def conv_silu(x, cin, cout, k, stride=1):
        return g.silu(g.conv(x, cin, cout, k, stride=stride))

    def residual(x, c):
        return g.op("Add", [x, conv_silu(conv_silu(x, c, c // 2, 1), c // 2, c, 3)])

    def up(x):
        return g.op("Resize", [x, "", g.const(np.array([1, 1, 2, 2], np.float32))],
                    mode="nearest")

    x = conv_silu("image", 3, 16, 3, stride=2)        # /2
    x = residual(conv_silu(x, 16, 32, 3, stride=2), 32)   # /4
    p3 = residual(conv_silu(x, 32, 64, 3, stride=2), 64)  # /8
    p4 = residual(conv_silu(p3, 64, 128, 3, stride=2), 128)  # /16
    p5 = residual(conv_silu(p4, 128, 256, 3, stride=2), 256)  # /32
    n5 = conv_silu(p5, 256, 128, 1)
    n4 = conv_silu(g.op("Add", [conv_silu(p4, 128, 128, 1), up(n5)]), 128, 128, 3)
    n3 = conv_silu(g.op("Add", [conv_silu(p3, 64, 128, 1), up(n4)]), 128, 64, 3)
    per_cell = 5 + classes
    heads = []
    for feature, channels, stride in ((n3, 64, 8), (n4, 128, 16), (n5, 128, 32)):
        cells = (size // stride) ** 2
        y = g.conv(feature, channels, anchors * per_cell, 1)
        y = g.op("Reshape", [y, g.ints([1, anchors, per_cell, cells])])
        heads.append(g.op("Sigmoid", [g.op("Transpose", [y], perm=[0, 1, 3, 2])]))
    out = g.op("Concat", heads, axis=2)
    return (g.model("yolo_detector", [float_input("image", [1, 3, size, size])], [out]),
            {"image": normal_array([1, 3, size, size], 4)})


def light(name: str):
    """The onnx package's light graph with seeded weights, its initializers off the input
    list."""
    model = light_model(name)
    strip_initializer_inputs(model)
    specs = [(v.name, [d.dim_value for d in v.type.tensor_type.shape.dim])
             for v in model.graph.input]
    return model, {name: normal_array(shape) for name, shape in specs}


SUITE = {
    "mlp_b1": lambda: mlp(1),
    "mlp_b8": lambda: mlp(8),
    "mlp_b64": lambda: mlp(64),
    "wide_and_deep": wide_and_deep,
    "bert_layer": bert_layer,
    "gpt2_block": gpt2_block,
    "vit": vit,
    "mobilenet_v2": mobilenet_v2,
    "mobilenet_v3_block": mobilenet_v3_block,
    "efficientnet_block": efficientnet_block,
    "tcn": tcn,
    "unet": unet,
    "lstm": lambda: recurrent("LSTM"),
    "gru": lambda: recurrent("GRU"),
    "llama_decode": llama_decode,
    "yolo_detector": yolo_detector,
    **{name: (lambda name=name: light(name))
       for name in ("resnet50", "densenet121", "inception_v1", "inception_v2", "shufflenet",
                    "vgg19", "zfnet512", "bvlc_alexnet", "squeezenet")},
}
