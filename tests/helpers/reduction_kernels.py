"""GPU reduction kernels as the ONNX import fuses them (softmax, norms, means, squeeze-and-excite
products, batch-1 dense layers), for the GPU reduction rules' tests, and the check of a schedule
of one against the census's goals."""

from tvm import te

from tvm_hetero.relax_ir import OP_KINDS_ATTR
from tvm_hetero.target import cuda_multiprocessors
from tvm_hetero.testing.gpu_census import GOALS, launch_shape
from tvm_hetero.testing.gpu_emulation import check_gpu_schedule
from tvm_hetero.testing.scheduled import estimated_flops

SMS = cuda_multiprocessors("sm_90")


def func(tensors, kinds):
    """A PrimFunc of `tensors` with the op kinds `kinds`."""
    return te.create_prim_func(tensors).with_attr(OP_KINDS_ATTR, kinds)


def softmax(heads: int, length: int):
    """An attention softmax over rows of `length` (BERT: 128, ViT: 197)."""
    from tvm import te, topi

    x = te.placeholder((1, heads, length, length), "float32", name="x")
    return func([x, topi.nn.softmax(x, axis=-1)], ["softmax"])


def masked_softmax(heads: int, length: int):
    """BERT's softmax as torch exports it with an attention mask: the softmax, then
    ``where(isnan(p), 0, p)`` (TorchScript and dynamo alike)."""
    from tvm import te, tirx, topi

    x = te.placeholder((1, heads, length, length), "float32", name="x")
    zero = te.placeholder((1,), "float32", name="zero")
    p = topi.nn.softmax(x, axis=-1)
    nan = te.compute(p.shape, lambda *i: tirx.isnan(p(*i)), name="compute")
    y = te.compute(p.shape, lambda *i: tirx.Select(nan(*i), zero[0], p(*i)), name="T_where")
    return func([x, zero, y], ["softmax", "tir_isnan", "where"])


def layer_norm(rows: int, width: int):
    """A layer norm over rows of `width`."""
    from tvm import te, topi

    x = te.placeholder((1, rows, width), "float32", name="x")
    gamma = te.placeholder((width,), "float32", name="gamma")
    beta = te.placeholder((width,), "float32", name="beta")
    return func([x, gamma, beta, topi.nn.layer_norm(x, gamma, beta, axis=[-1])],
                 ["layer_norm"])


def rms_norm(width: int):
    """A decode step's RMS norm (one row) as llama_decode's import fuses it: the mean of the
    squares (squared by another kernel), then x / sqrt(mean + eps) * weight."""
    from tvm import te, topi

    squares = te.placeholder((1, 1, width), "float32", name="squares")
    x = te.placeholder((1, 1, width), "float32", name="x")
    w = te.placeholder((width,), "float32", name="w")
    mean = topi.divide(topi.sum(squares, axis=2, keepdims=True), float(width))
    scale = topi.divide(1.0, topi.sqrt(topi.add(mean, 1e-6)))
    out = topi.multiply(topi.multiply(x, scale), w)
    return func([squares, x, w, out], ["mean", "add", "tir_sqrt", "divide", "multiply"])


def mean(channels: int, size: int):
    """A global average pool as the ONNX import writes it (a sum, then a divide)."""
    from tvm import te, topi

    x = te.placeholder((1, channels, size, size), "float32", name="x")
    total = topi.sum(x, axis=(2, 3), keepdims=True)
    return func([x, topi.divide(total, float(size * size))], ["mean"])


def excite(squeezed: int, channels: int, size: int, gate: str):
    """A squeeze-and-excite 1x1 convolution on a 1x1 map, its bias and gate, times the
    feature map (EfficientNet: sigmoid; MobileNetV3: hard sigmoid), fused as one kernel."""
    from tvm import te, topi

    s = te.placeholder((1, squeezed, 1, 1), "float32", name="s")
    w = te.placeholder((channels, squeezed, 1, 1), "float32", name="w")
    b = te.placeholder((1, channels, 1, 1), "float32", name="b")
    feature = te.placeholder((1, channels, size, size), "float32", name="feature")
    y = topi.add(topi.nn.conv2d_nchw(s, w, 1, 0, 1), b)
    if gate == "sigmoid":
        y, ops = topi.sigmoid(y), ["tir_sigmoid"]
    else:
        y, ops = topi.clip(topi.add(topi.multiply(y, 1.0 / 6), 0.5), 0.0, 1.0), \
            ["multiply", "add", "tir_clip"]
    out = te.compute(feature.shape, lambda n, c, h, x: feature[n, c, h, x] * y[n, c, 0, 0],
                     name="excite")
    return func([s, w, b, feature, out], ["conv2d", "add", *ops, "multiply"])


def dense(inputs: int, outputs: int, weight_layout: str = "KN", batch: int = 1):
    """A dense layer + bias + ReLU on `weight_layout` weights ([K, N]: a column reduction,
    as an ONNX MatMul writes it; [N, K]: a row reduction, as Gemm with transB writes it)."""
    from tvm import te, topi

    x = te.placeholder((batch, inputs), "float32", name="x")
    shape = (inputs, outputs) if weight_layout == "KN" else (outputs, inputs)
    w = te.placeholder(shape, "float32", name="w")
    b = te.placeholder((outputs,), "float32", name="b")
    k = te.reduce_axis((0, inputs), name="k")
    if weight_layout == "KN":
        y = te.compute((batch, outputs), lambda i, j: te.sum(x[i, k] * w[k, j], axis=k))
    else:
        y = te.compute((batch, outputs), lambda i, j: te.sum(x[i, k] * w[j, k], axis=k))
    return func([x, w, b, topi.nn.relu(topi.add(y, b))], ["matmul", "add", "relu"])


def elementwise():
    """A ReLU: no reduction."""
    from tvm import te, topi

    x = te.placeholder((1, 64, 28, 28), "float32", name="x")
    return func([x, topi.nn.relu(x)], ["relu"])


def checked(func, scheduled):
    """Emulated answers right; the work ratio and blocks of `scheduled`."""
    assert scheduled is not None
    check_gpu_schedule(func, scheduled)
    work = estimated_flops(scheduled) / estimated_flops(func)
    assert work <= GOALS.max_work, f"{work:.2f}x the layer's work"
    blocks, _ = launch_shape(scheduled)
    if estimated_flops(func) / 1e6 >= GOALS.min_mflop_for_sms:
        assert blocks >= SMS, f"{blocks} blocks < {SMS} SMs"
    return work, blocks
