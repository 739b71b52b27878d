"""Convolutions (grouped, depthwise, dilated, strided, 1-D, transposed), batch
normalization, pools, ``Resize``, depth/space moves and the convolutional patterns of real
models (squeeze-excite, residual blocks, an epilogue read twice). Each ``op_*`` returns False
when it does not fit (the builder then rolls back)."""

from __future__ import annotations

import numpy as np

from .builder import CHANNELS, MAX_ELEMENTS, MAX_RMS, Builder, Value, numel
from .elementwise import activation


def _conv_geometry(b: Builder, extent: int, standard: bool):
    """(kernel, stride, dilation, pad begin, pad end, output extent) along one axis."""
    if standard:
        kernel, stride, dilation = 3, 1, 1
        pads = (1, 1)
    else:
        kernel = b.choice((1, 1, 2, 3, 3, 5, 7))
        stride = b.choice((1, 1, 1, 2, 3))
        dilation = b.choice((1, 1, 1, 2, 3))
        pad = b.choice((0, 0, 1, 2, (kernel - 1) * dilation // 2))
        pads = (pad, pad) if b.chance(0.7) else (pad, b.randint(0, kernel - 1))
    span = (kernel - 1) * dilation + 1
    if extent + pads[0] + pads[1] < span:
        kernel, dilation, span = 1, 1, 1
    pads = (min(pads[0], span - 1), min(pads[1], span - 1))
    out = (extent + pads[0] + pads[1] - span) // stride + 1
    return kernel, stride, dilation, pads[0], pads[1], out


def op_conv(b: Builder) -> bool:
    x = b.pick(lambda v: v.rank in (3, 4))
    if x is None:
        return False
    channels, spatial = x.shape[1], x.shape[2:]
    standard = b.chance(0.35) and all(s >= 3 for s in spatial)
    geometry = [_conv_geometry(b, s, standard) for s in spatial]
    kind = "plain" if standard else b.choice(("plain", "plain", "plain", "depthwise", "grouped"))
    if kind == "depthwise":
        group = channels
        filters = channels * b.choice((1, 1, 2))
    elif kind == "grouped":
        divisors = [d for d in range(2, channels) if channels % d == 0]
        if not divisors:
            return False
        group = b.choice(divisors)
        filters = group * b.choice((1, 2, 3))
    else:
        group = 1
        filters = b.choice((16, 32, 32, 24) if standard else CHANNELS + (48,))
    out_shape = (x.shape[0], filters) + tuple(g[-1] for g in geometry)
    if numel(out_shape) > MAX_ELEMENTS:
        return False
    kernel = [g[0] for g in geometry]
    fan_in = channels // group * int(np.prod(kernel))
    inputs = [x.name, b.weight((filters, channels // group, *kernel), fan_in)]
    if b.chance(0.6):
        inputs.append(b.floats(b.rng.standard_normal(filters) * 0.1))
    attrs = dict(kernel_shape=kernel, strides=[g[1] for g in geometry])
    if any(g[2] != 1 for g in geometry) or b.chance(0.2):
        attrs["dilations"] = [g[2] for g in geometry]
    if b.chance(0.1) and not standard and all(g[2] == 1 for g in geometry):
        # auto_pad: SAME_UPPER/SAME_LOWER keep ceil(extent / stride)
        attrs["auto_pad"] = b.choice(("SAME_UPPER", "SAME_LOWER"))
        out_shape = (x.shape[0], filters) + tuple(-(-s // g[1]) for s, g in zip(spatial, geometry))
    else:
        attrs["pads"] = [g[3] for g in geometry] + [g[4] for g in geometry]
    if group > 1:
        attrs["group"] = group
    (out,) = b.node("Conv", inputs, **attrs)
    # a broadcast copy along a spatial axis stays one inside the borders
    value = b.add(out, out_shape, rms=x.rms, flat=frozenset(a for a in x.flat if a >= 2))
    if b.chance(0.2):
        value = _batch_norm(b, value)
    activation(b, value)
    return True


def op_conv_transpose(b: Builder) -> bool:
    x = b.pick(lambda v: v.rank in (3, 4))
    if x is None:
        return False
    channels, spatial = x.shape[1], x.shape[2:]
    kernel = [b.choice((1, 2, 3, 4)) for _ in spatial]
    stride = [b.choice((1, 2, 2)) for _ in spatial]
    pads = [b.randint(0, max(k - 1, 0)) for k in kernel] * 2
    output_padding = [b.randint(0, s - 1) if b.chance(0.3) else 0 for s in stride]
    out_spatial = [s * (e - 1) + op + k - pb - pe for e, s, op, k, pb, pe in
                   zip(spatial, stride, output_padding, kernel, pads[:len(spatial)],
                       pads[len(spatial):])]
    group = channels if b.chance(0.2) else 1
    filters = group if group > 1 else b.choice(CHANNELS)
    out_shape = (x.shape[0], filters, *out_spatial)
    if min(out_spatial) < 1 or numel(out_shape) > MAX_ELEMENTS:
        return False
    fan_in = channels // group * int(np.prod(kernel))
    inputs = [x.name, b.weight((channels, filters // group, *kernel), fan_in)]
    if b.chance(0.5):
        inputs.append(b.floats(b.rng.standard_normal(filters) * 0.1))
    attrs = dict(kernel_shape=kernel, strides=stride, pads=pads)
    if any(output_padding):
        attrs["output_padding"] = output_padding
    if group > 1:
        attrs["group"] = group
    (out,) = b.node("ConvTranspose", inputs, **attrs)
    activation(b, b.add(out, out_shape, rms=x.rms * 2,
                         flat=frozenset(a for a in x.flat if a >= 2)))
    return True


def _batch_norm(b: Builder, x: Value) -> Value:
    channels = x.shape[1]
    inputs = [x.name, b.floats(b.rng.uniform(0.5, 1.5, channels)),
              b.floats(b.rng.standard_normal(channels) * 0.1),
              b.floats(b.rng.standard_normal(channels) * 0.1),
              b.floats(b.rng.uniform(0.5, 1.5, channels))]
    (out,) = b.node("BatchNormalization", inputs, epsilon=float(b.choice((1e-5, 1e-3))))
    return b.add(out, x.shape, rms=x.rms * 1.5 + 0.2, flat=x.flat)


def op_batch_norm(b: Builder) -> bool:
    x = b.pick(lambda v: v.rank >= 2)
    if x is None:
        return False
    _batch_norm(b, x)
    return True


def op_pool(b: Builder) -> bool:
    x = b.pick(lambda v: v.rank in (3, 4))
    if x is None:
        return False
    op = b.choice(("MaxPool", "MaxPool", "AveragePool", "AveragePool", "GlobalAveragePool",
                   "GlobalMaxPool"))
    if op.startswith("Global"):
        (out,) = b.node(op, [x.name])
        b.add(out, x.shape[:2] + (1,) * (x.rank - 2), rms=x.rms,
              flat=frozenset(a for a in x.flat if a < 2))
        return True
    spatial = x.shape[2:]
    kernel = [min(b.choice((1, 2, 2, 3, 3, 5)), s) for s in spatial]
    strides = [b.choice((1, 2, 2, 3)) for _ in spatial]
    pads = [b.randint(0, (k - 1) // 2) if b.chance(0.5) else 0 for k in kernel]
    pads_end = [p if b.chance(0.7) else b.randint(0, k - 1) for p, k in zip(pads, kernel)]
    ceil_mode = int(b.chance(0.2))
    out_spatial = []
    for s, k, st, pb, pe in zip(spatial, kernel, strides, pads, pads_end):
        total = s + pb + pe - k
        n = (-(-total // st) if ceil_mode else total // st) + 1
        if ceil_mode and (n - 1) * st >= s + pb:  # the last window would start in the padding
            return False
        out_spatial.append(n)
    attrs = dict(kernel_shape=kernel, strides=strides, pads=pads + pads_end)
    if ceil_mode:
        attrs["ceil_mode"] = 1
    if op == "AveragePool" and b.chance(0.5):
        attrs["count_include_pad"] = 1
    if op == "MaxPool" and b.chance(0.15) and not ceil_mode:
        dilation = [2 if s >= 2 * k else 1 for s, k in zip(spatial, kernel)]
        if any(d > 1 for d in dilation):
            attrs["dilations"] = dilation
            out_spatial = [(s + pb + pe - (k - 1) * d - 1) // st + 1 for s, k, d, st, pb, pe in
                           zip(spatial, kernel, dilation, strides, pads, pads_end)]
    if min(out_spatial) < 1:
        return False
    (out,) = b.node(op, [x.name], **attrs)
    b.add(out, x.shape[:2] + tuple(out_spatial), rms=x.rms, flat=x.flat,
          exact=x.exact and op == "MaxPool")
    return True


def op_resize(b: Builder) -> bool:
    x = b.pick(lambda v: v.rank in (3, 4))
    if x is None:
        return False
    spatial = x.shape[2:]
    mode = b.choice(("nearest", "nearest", "linear"))
    attrs = dict(mode=mode)
    if mode == "nearest":
        # integer up-scaling (or halving even extents with floor): no rounding ties
        style = b.choice(("up_half_pixel", "up_asymmetric", "down"))
        if style == "down" and all(s % 2 == 0 for s in spatial):
            scale = [0.5] * len(spatial)
            attrs.update(coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        else:
            scale = [float(b.choice((2, 2, 3))) if s > 0 else 1.0 for s in spatial]
            if style == "up_asymmetric":
                attrs.update(coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        out_spatial = [int(s * f) for s, f in zip(spatial, scale)]
        inputs = [x.name, "", b.floats([1.0, 1.0] + scale)]
    else:
        attrs["coordinate_transformation_mode"] = b.choice(
            ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"))
        if b.chance(0.5):
            scale = [float(b.choice((2, 2, 3))) for _ in spatial]
            out_spatial = [int(s * f) for s, f in zip(spatial, scale)]
            inputs = [x.name, "", b.floats([1.0, 1.0] + scale)]
        else:  # any sizes
            out_spatial = [b.choice((max(1, s // 2), s + 1, 2 * s - 1, s + 3)) for s in spatial]
            inputs = [x.name, "", "", b.ints(list(x.shape[:2]) + out_spatial)]
    out_shape = x.shape[:2] + tuple(out_spatial)
    if numel(out_shape) > MAX_ELEMENTS or min(out_spatial) < 1:
        return False
    (out,) = b.node("Resize", inputs, **attrs)
    b.add(out, out_shape, rms=x.rms, flat=x.flat, exact=x.exact and mode == "nearest")
    return True


def op_depth_space(b: Builder) -> bool:
    x = b.pick(lambda v: v.rank == 4)
    if x is None:
        return False
    n, c, h, w = x.shape
    if c % 4 == 0 and b.chance(0.5):
        mode = b.choice(("DCR", "CRD"))
        (out,) = b.node("DepthToSpace", [x.name], blocksize=2, mode=mode)
        shape = (n, c // 4, h * 2, w * 2)
    elif h % 2 == 0 and w % 2 == 0:
        (out,) = b.node("SpaceToDepth", [x.name], blocksize=2)
        shape = (n, c * 4, h // 2, w // 2)
    else:
        return False
    b.add(out, shape, rms=x.rms, exact=x.exact,
          flat=frozenset(range(4)) if x.flat else frozenset())
    return True


# -- real-model patterns (several nodes) ---------------------------------------------------


def op_squeeze_excite(b: Builder) -> bool:
    """x * Sigmoid(Conv(Relu(Conv(GlobalAveragePool(x))))), with a convolution before."""
    x = b.pick(lambda v: v.rank == 4)
    if x is None:
        return False
    if b.chance(0.5):
        channels = b.choice((8, 14, 16, 24, 32))
        if numel((x.shape[0], channels) + x.shape[2:]) > MAX_ELEMENTS:
            return False
        (conv,) = b.node("Conv", [x.name, b.weight((channels, x.shape[1], 3, 3),
                                                   x.shape[1] * 9)],
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        x = b.add(conv, (x.shape[0], channels) + x.shape[2:], rms=x.rms)
    channels = x.shape[1]
    squeeze = max(1, channels // b.choice((2, 4, 8)))
    (pool,) = b.node("GlobalAveragePool", [x.name])
    (c1,) = b.node("Conv", [pool, b.weight((squeeze, channels, 1, 1), channels),
                            b.floats(np.zeros(squeeze))], kernel_shape=[1, 1])
    (r,) = b.node("Relu", [c1])
    (c2,) = b.node("Conv", [r, b.weight((channels, squeeze, 1, 1), squeeze)],
                   kernel_shape=[1, 1])
    (s,) = b.node("Sigmoid", [c2])
    (out,) = b.node("Mul", [x.name, s])
    b.add(out, x.shape, rms=x.rms, flat=x.flat)
    return True


def op_residual(b: Builder) -> bool:
    """Relu(x + Conv(Relu(Conv(x)))): a residual block, same channels, 3x3 pad 1."""
    x = b.pick(lambda v: v.rank == 4)
    if x is None:
        return False
    c = x.shape[1]
    (c1,) = b.node("Conv", [x.name, b.weight((c, c, 3, 3), c * 9), b.floats(np.zeros(c))],
                   kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    (r,) = b.node("Relu", [c1])
    (c2,) = b.node("Conv", [r, b.weight((c, c, 3, 3), c * 9, scale=0.5)],
                   kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    (s,) = b.node("Add", [c2, x.name] if b.chance(0.5) else [x.name, c2])
    (out,) = b.node("Relu", [s])
    b.add(out, x.shape, rms=x.rms * 1.5, flat=x.flat)
    return True


def op_conv_fanout(b: Builder) -> bool:
    """c * (c / s) or c + c * s after a 3x3 convolution: an epilogue read twice."""
    x = b.pick(lambda v: v.rank == 4 and min(v.shape[2:]) >= 3)
    if x is None:
        return False
    filters = b.choice((16, 32, 32, 13))
    shape = (x.shape[0], filters) + x.shape[2:]
    if numel(shape) > MAX_ELEMENTS:
        return False
    (c,) = b.node("Conv", [x.name, b.weight((filters, x.shape[1], 3, 3), x.shape[1] * 9),
                           b.floats(b.rng.standard_normal(filters) * 0.1)],
                  kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    scale = b.floats(b.rng.uniform(0.5, 2.0, (filters, 1, 1)))
    if b.chance(0.5):
        (d,) = b.node("Div", [c, scale])
        (out,) = b.node("Mul", [c, d])
        rms = x.rms ** 2 * 2
    else:
        (d,) = b.node("Mul", [c, scale])
        (out,) = b.node("Add", [c, d])
        rms = x.rms * 3
    if rms > MAX_RMS:
        return False
    b.add(out, shape, rms=rms, flat=x.flat - {1})
    return True


__all__ = ["op_batch_norm", "op_conv", "op_conv_fanout", "op_conv_transpose", "op_depth_space",
           "op_pool", "op_residual", "op_resize", "op_squeeze_excite"]
