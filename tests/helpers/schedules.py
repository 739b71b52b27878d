"""The rule-schedule tests' shared parts: the targets they schedule for, the check against an
expected PrimFunc, the loops of a schedule (for the key properties of a schedule too long to
write out), and small kernels built with ``te`` (the kernels a rule declines, and the second
shapes of the long schedules)."""

import tvm
from tvm import te, topi

from tvm_hetero.ops import conv2d_nchwc, grouped_conv1x1, winograd
from tvm_hetero.target import cuda_target

# AVX-512: 16 fp32 lanes, 32 vector registers, 32 KiB L1d (cpu_traits); 2 cores
CPU = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}
CUDA = {"kind": "cuda", "arch": "sm_90", "max_num_threads": 1024, "thread_warp_size": 32}
# the table's target for an H100/H200: 132 SMs (by arch: CUDA_LIMITS), 1024 threads and 48 KiB
# of static shared memory a block, which the package's GPU rules read
SM_90 = cuda_target("sm_90")


def schedule(rule, func, target=CPU):
    """`rule` applied to `func` for `target`.

    Parameters
    ----------
    rule : tvm_hetero.optimize.Rule
        The rule.
    func : tvm.tirx.PrimFunc
        The kernel, unscheduled.
    target : dict or tvm.target.Target
        The target the rule schedules for.

    Returns
    -------
    tvm.tirx.PrimFunc
        The scheduled kernel; the rule must not decline it.
    """
    scheduled = rule.apply(func, tvm.target.Target(target))
    assert scheduled is not None, f"{rule.name} declined the kernel"
    return scheduled


def check(rule, before, expected, target=CPU):
    """Assert that `rule` schedules `before` into `expected` (structurally); a mismatch shows
    the schedule the rule writes now, to read against the rule's docstring and paste over
    `expected`."""
    scheduled = schedule(rule, before, target)
    try:
        tvm.ir.assert_structural_equal(scheduled, expected)
    except ValueError as err:
        raise AssertionError(f"{rule.name} changed its schedule: {err}\n\nNow:\n"
                             f"{scheduled.script()}") from None


def declines(rule, func, target=None) -> bool:
    """Whether `rule` declines `func` (returns None) for CPU, or CUDA for a GPU rule."""
    target = target or (CUDA if rule.families != ("cpu",) else CPU)
    return rule.apply(func, tvm.target.Target(target)) is None


def loops(func) -> list[tuple[str, int, str]]:
    """The loops of `func`, each as (kind, extent, thread tag); the kind is ``serial``,
    ``parallel``, ``vectorized``, ``unrolled`` or ``thread_binding``."""
    import tvm_ffi

    found = []

    def visit(node):
        if isinstance(node, tvm.tirx.For):
            tag = node.thread_binding.thread_tag if node.thread_binding is not None else ""
            kind = {0: "serial", 1: "parallel", 2: "vectorized", 3: "unrolled",
                    4: "thread_binding"}[int(node.kind)]
            found.append((kind, int(node.extent), str(tag)))
        return node

    tvm_ffi.structural_map(func.body, visit)
    return found


def kernel(kinds, *tensors):
    """A layer's PrimFunc: `tensors` (inputs, then the output) with its fused ops `kinds`."""
    return te.create_prim_func(list(tensors)).with_attr("tvm_hetero.op_kinds", kinds)


def placeholders(*shapes):
    """Float32 inputs named x, w, z, ... in order."""
    return [te.placeholder(shape, name=name) for shape, name in zip(shapes, "xwzuv")]


def add_multiply(rows=64, cols=512):
    """``(x + w) * x`` over a `rows` x `cols` matrix."""
    x, w = placeholders((rows, cols), (rows, cols))
    return kernel(["add", "multiply"], x, w, topi.multiply(topi.add(x, w), x))


def separable_resize(channels=4, size=8, out=32):
    """A bilinear upsampling as preparation legalizes it (``ops.resize.separable_linear``): the
    columns pass, then the rows pass, each reading its indices and weights from tables."""
    from tvm_hetero.ops import resize

    (x,) = placeholders((1, channels, size, size))
    tables = []
    for axis in ("row", "col"):
        tables += [te.placeholder((out,), "int32", name=f"{axis}_first"),
                   te.placeholder((out,), "int32", name=f"{axis}_second"),
                   te.placeholder((out,), "float32", name=f"{axis}_weight")]
    return kernel(["resize2d"], x, *tables, resize.separable_linear(x, *tables))


def concat(channels=(8, 24), size=32, images=2):
    """Two NCHW tensors concatenated along the channels."""
    x, w = placeholders(*[(images, c, size, size) for c in channels])
    return kernel(["concatenate"], x, w, topi.concatenate([x, w], 1))


def to_nchw16c(channels=32, rows=8, cols=16):
    """An NCHW -> NCHW16c layout transform."""
    (x,) = placeholders((1, channels, rows, cols))
    out = te.compute((1, channels // 16, rows, cols, 16),
                     lambda n, c, h, w, lane: x[n, c * 16 + lane, h, w],
                     name="te_layout_transform")
    return kernel(["te_layout_transform"], x, out)


def matmul_bias(rows, reduced, cols, transpose_weight=False):
    """``x @ w + z``, the weight [reduced, cols] (or [cols, reduced] transposed)."""
    x, w, z = placeholders((rows, reduced),
                           (cols, reduced) if transpose_weight else (reduced, cols), (cols,))
    return kernel(["matmul", "add"], x, w, z,
                  topi.add(topi.matmul(x, w, transp_b=transpose_weight), z))


def gemv(size):
    """A [1, size] x [size, size] matrix-vector product."""
    x, w = placeholders((1, size), (size, size))
    return kernel(["matmul"], x, w, topi.matmul(x, w))


def softmax(rows=128, cols=64):
    """A softmax over the last axis."""
    (x,) = placeholders((rows, cols))
    return kernel(["softmax"], x, topi.nn.softmax(x))


def mean_over_pixels(channels=16, size=5):
    """A global mean pool: the sum over the pixels, then the division."""
    (x,) = placeholders((1, channels, size, size))
    return kernel(["mean"], x,
                  topi.divide(topi.sum(x, axis=(2, 3), keepdims=True), float(size * size)))


def max_pool(channels, size):
    """A 2 x 2 stride-2 max pool."""
    (x,) = placeholders((1, channels, size, size))
    return kernel(["max_pool2d"], x,
                  topi.nn.pool2d(x, (2, 2), (2, 2), (1, 1), (0, 0, 0, 0), "max"))


def depthwise(width, channels=2, rows=4):
    """A 3 x 3 depthwise convolution, padding 1."""
    x, w = placeholders((1, channels, rows, width), (channels, 1, 3, 3))
    return kernel(["conv2d"], x, w, topi.nn.group_conv2d_nchw(x, w, 1, 1, 1, channels))


def conv3x3(out_channels, in_channels=4, size=4):
    """A 3 x 3 convolution, padding 1."""
    x, w = placeholders((1, in_channels, size, size), (out_channels, in_channels, 3, 3))
    return kernel(["conv2d"], x, w, topi.nn.conv2d_nchw(x, w, 1, 1, 1))


def conv1x1_residual(window=1, in_channels=4, out_channels=32, size=4):
    """A convolution (1 x 1 unless `window`) with a residual add."""
    x, w, z = placeholders((1, in_channels, size, size),
                           (out_channels, in_channels, window, window),
                           (1, out_channels, size, size))
    conv = topi.nn.conv2d_nchw(x, w, 1, window // 2, 1)
    return kernel(["conv2d", "add"], x, w, z, topi.add(conv, z))


def grouped_1x1(channels=4, size=3, groups=2, lanes=16):
    """Preparation's per-group form of a grouped 1 x 1 convolution, pixels padded to `lanes`."""
    x, w = placeholders((1, channels, size, size), (channels, channels // groups, 1, 1))
    return kernel(["conv2d"], x, w, grouped_conv1x1.grouped_conv2d_1x1(x, w, groups, lanes))


def blocked_conv(lanes=16, out_blocks=2, size=4):
    """A 3 x 3 convolution in the blocked layout NCHW[lanes]c, 16 input channels."""
    x, w = placeholders((1, 16 // lanes, size, size, lanes),
                        (out_blocks, 16 // lanes, 3, 3, lanes, lanes))
    return kernel(["conv2d"], x, w,
                  conv2d_nchwc.conv2d_nchwc(x, w, (1, 1), (1, 1, 1, 1), (1, 1)))


def blocked_depthwise(lanes=16, channels=16, size=4):
    """A 3 x 3 depthwise convolution in the blocked layout NCHW[lanes]c."""
    x, w = placeholders((1, channels // lanes, size, size, lanes),
                        (channels // lanes, 1, 3, 3, 1, lanes))
    return kernel(["conv2d"], x, w,
                  conv2d_nchwc.depthwise_conv2d_nchwc(x, w, (1, 1), (1, 1, 1, 1), (1, 1)))


def winograd_conv(size=8, out_blocks=1):
    """Preparation's Winograd form of a 3 x 3 convolution, 16 channels in (tiles of 4 x 4)."""
    x, w = placeholders((1, 1, size, size, 16), (6, 6, 16, 16 * out_blocks))
    return kernel(["conv2d"], x, w, winograd.conv2d_nchwc(x, w))


def centred_rows(rows=8, cols=4):
    """Each row minus its sum."""
    (x,) = placeholders((rows, cols))
    return kernel(["sum", "subtract"], x, topi.subtract(x, topi.sum(x, axis=1, keepdims=True)))


def power(shape=(8,), exponent=3.0):
    """``x ** exponent``."""
    (x,) = placeholders(shape)
    return kernel(["power"], x, topi.power(x, exponent))


def exponential(rows=4, cols=64):
    """``exp(x)``."""
    (x,) = placeholders((rows, cols))
    return kernel(["exp"], x, topi.exp(x))


def conv3x3_map(channels=256, size=14):
    """A 3 x 3 convolution of a `channels` x `size` x `size` map into as many channels."""
    x, w = placeholders((1, channels, size, size), (channels, channels, 3, 3))
    return kernel(["conv2d"], x, w, topi.nn.conv2d_nchw(x, w, 1, 1, 1))


def depthwise_map(channels=32, size=112):
    """A 3 x 3 depthwise convolution of a `channels` x `size` x `size` map."""
    x, w = placeholders((1, channels, size, size), (channels, 1, 3, 3))
    return kernel(["conv2d"], x, w, topi.nn.group_conv2d_nchw(x, w, 1, 1, 1, channels))


def dense_row(reduced=1024, cols=256):
    """A batch-1 dense layer on [output, reduction] weights: a row per output."""
    x, w = placeholders((1, reduced), (cols, reduced))
    return kernel(["matmul"], x, w, topi.nn.dense(x, w))
