"""Data movement: ``Concat``, ``Split``, ``Slice``, ``Pad``, reshapes, transposes,
``Squeeze`` / ``Unsqueeze``, ``Gather``, ``Expand`` and ``Tile``. Each ``op_*`` returns False
when it does not fit (the builder then rolls back)."""

from __future__ import annotations

import numpy as np

from .builder import MAX_ELEMENTS, MAX_RANK, Builder, Value, broadcast, numel, stretched_axes


def op_concat(b: Builder) -> bool:
    x = b.pick(lambda v: v.rank >= 1)
    if x is None:
        return False
    axis = b.randint(0, x.rank - 1)
    parts = [x]
    for _ in range(b.choice((1, 1, 2))):
        if b.chance(0.6):
            other = b.pick(lambda v: v.rank == x.rank and all(
                e == f for i, (e, f) in enumerate(zip(v.shape, x.shape)) if i != axis))
            if other is not None:
                parts.append(other)
                continue
        shape = list(x.shape)
        shape[axis] = b.choice((1, 2, 3, 5, 8, 13))
        if b.chance(0.3):
            parts.append(b.graph_input(shape))
        else:
            parts.append(Value(b.floats(b.rng.standard_normal(shape)), tuple(shape)))
    out_shape = list(x.shape)
    out_shape[axis] = sum(p.shape[axis] for p in parts)
    if numel(out_shape) > MAX_ELEMENTS:
        return False
    if b.chance(0.5):
        b.rng.shuffle(parts)
    (out,) = b.node("Concat", [p.name for p in parts], axis=b.axis(x.rank, axis))
    flat = frozenset.intersection(*[p.flat for p in parts]) - {axis}
    b.add(out, out_shape, rms=max(p.rms for p in parts), flat=flat,
          exact=all(p.exact for p in parts))
    return True


def op_split(b: Builder) -> bool:
    x = b.pick(lambda v: v.rank >= 1 and max(v.shape) >= 2)
    if x is None:
        return False
    axis = b.choice([i for i, e in enumerate(x.shape) if e >= 2])
    extent = x.shape[axis]
    parts = b.randint(2, min(3, extent))
    if extent % parts == 0 and b.chance(0.4):
        sizes = [extent // parts] * parts
        inputs = [x.name]
    else:
        cuts = sorted(b.rng.choice(np.arange(1, extent), parts - 1, replace=False).tolist())
        sizes = [e - s for s, e in zip([0] + cuts, cuts + [extent])]
        inputs = [x.name, b.ints(sizes)]
    outs = b.node("Split", inputs, outputs=parts, axis=b.axis(x.rank, axis))
    for name, size in zip(outs, sizes):
        shape = list(x.shape)
        shape[axis] = size
        b.add(name, shape, rms=x.rms, flat=x.flat, exact=x.exact)
    return True


def op_slice(b: Builder) -> bool:
    x = b.pick(lambda v: v.rank >= 1 and max(v.shape) >= 2)
    if x is None:
        return False
    axes = [i for i, e in enumerate(x.shape) if e >= 2]
    axes = sorted(b.rng.choice(axes, b.randint(1, min(2, len(axes))), replace=False).tolist())
    starts, ends, steps, out_shape = [], [], [], list(x.shape)
    for axis in axes:
        n = x.shape[axis]
        step = b.choice((1, 1, 1, 2, 3, -1))
        start = b.randint(-n, n - 1)
        if step > 0:
            end = b.choice((n, 2 ** 31 - 1, -1, b.randint(-n + 1, n)))
        else:
            end = b.choice((-(2 ** 31), -n - 1, b.randint(-n, n - 1)))
        count = len(range(*slice(start, end, step).indices(n)))
        if count < 1:
            start, end, step = 0, n, 1
            count = n
        starts.append(start)
        ends.append(end)
        steps.append(step)
        out_shape[axis] = count
    inputs = [x.name, b.ints(starts), b.ints(ends), b.ints([b.axis(x.rank, a) for a in axes])]
    if any(s != 1 for s in steps) or b.chance(0.3):
        inputs.append(b.ints(steps))
    (out,) = b.node("Slice", inputs)
    b.add(out, out_shape, rms=x.rms, flat=x.flat, exact=x.exact)
    return True


def op_pad(b: Builder) -> bool:
    x = b.pick(lambda v: v.rank >= 1)
    if x is None:
        return False
    mode = b.choice(("constant", "constant", "reflect", "edge"))
    begin, end = [0] * x.rank, [0] * x.rank
    axes = list(range(x.rank - 2, x.rank)) if b.chance(0.6) else list(range(x.rank))
    for axis in axes:
        if axis < 0 or not b.chance(0.7):
            continue
        limit = x.shape[axis] - 1 if mode == "reflect" else 3
        begin[axis] = b.randint(0, max(0, min(3, limit)))
        end[axis] = b.randint(0, max(0, min(3, limit)))
        if mode == "constant" and b.chance(0.1) and x.shape[axis] > 2:
            end[axis] = -1  # a negative pad crops
    out_shape = [e + p + q for e, p, q in zip(x.shape, begin, end)]
    if numel(out_shape) > MAX_ELEMENTS or min(out_shape) < 1:
        return False
    inputs = [x.name, b.ints(begin + end)]
    if mode == "constant" and b.chance(0.5):
        inputs.append(b.floats(float(b.choice((0.5, -1.0, 2.0)))))
    (out,) = b.node("Pad", inputs, mode=mode)
    padded = {a for a in range(x.rank) if begin[a] or end[a]}
    b.add(out, out_shape, rms=x.rms, flat=x.flat - padded if mode == "constant" else x.flat,
          exact=x.exact)
    return True


def _factorize(b: Builder, total: int, rank: int) -> list[int]:
    """`total` as a product of `rank` extents."""
    dims = [1] * rank
    left = total
    primes = []
    p = 2
    while p * p <= left:
        while left % p == 0:
            primes.append(p)
            left //= p
        p += 1
    if left > 1:
        primes.append(left)
    for prime in primes:
        dims[b.randint(0, rank - 1)] *= prime
    return dims


def op_reshape(b: Builder) -> bool:
    x = b.pick(lambda v: v.rank >= 1)
    if x is None:
        return False
    total = numel(x.shape)
    if b.chance(0.3):  # Flatten
        axis = b.randint(0, x.rank)
        shape = (numel(x.shape[:axis]), numel(x.shape[axis:]))
        (out,) = b.node("Flatten", [x.name], axis=b.axis(x.rank, axis) if axis < x.rank else axis)
    else:
        rank = b.randint(1, 5)
        shape = _factorize(b, total, rank)
        spec = list(shape)
        if b.chance(0.4):
            spec[b.randint(0, rank - 1)] = -1
        for i in range(min(rank, x.rank)):
            if spec[i] == x.shape[i] and spec[i] != -1 and b.chance(0.3):
                spec[i] = 0  # copy the input's extent
        (out,) = b.node("Reshape", [x.name, b.ints(spec)])
    flat = frozenset(range(len(shape))) if x.flat else frozenset()
    b.add(out, shape, rms=x.rms, flat=flat, exact=x.exact)
    return True


def op_transpose(b: Builder) -> bool:
    x = b.pick(lambda v: v.rank >= 2)
    if x is None:
        return False
    perm = b.rng.permutation(x.rank).tolist()
    attrs = {} if b.chance(0.15) else dict(perm=perm)
    if not attrs:
        perm = list(range(x.rank))[::-1]
    (out,) = b.node("Transpose", [x.name], **attrs)
    b.add(out, [x.shape[p] for p in perm], rms=x.rms,
          flat=frozenset(i for i, p in enumerate(perm) if p in x.flat), exact=x.exact)
    return True


def op_squeeze(b: Builder) -> bool:
    x = b.pick(lambda v: 1 in v.shape or v.rank < MAX_RANK - 1)
    if x is None:
        return False
    ones = [i for i, e in enumerate(x.shape) if e == 1]
    if ones and (x.rank >= MAX_RANK - 1 or b.chance(0.6)):
        axes = sorted(b.rng.choice(ones, b.randint(1, len(ones)), replace=False).tolist())
        keep = [i for i in range(x.rank) if i not in axes]
        inputs = [x.name] if len(axes) == len(ones) and b.chance(0.2) else \
            [x.name, b.ints([b.axis(x.rank, a) for a in axes])]
        (out,) = b.node("Squeeze", inputs)
        shape = [x.shape[i] for i in keep]
        flat = frozenset(j for j, i in enumerate(keep) if i in x.flat)
    else:
        rank = x.rank + b.randint(1, 2)
        axes = sorted(b.rng.choice(rank, rank - x.rank, replace=False).tolist())
        (out,) = b.node("Unsqueeze", [x.name, b.ints([b.axis(rank, a) for a in axes])])
        source = iter(range(x.rank))
        mapping = [None if i in axes else next(source) for i in range(rank)]
        shape = [1 if m is None else x.shape[m] for m in mapping]
        flat = frozenset(i for i, m in enumerate(mapping) if m in x.flat)
    b.add(out, shape, rms=x.rms, flat=flat, exact=x.exact)
    return True


def op_gather(b: Builder) -> bool:
    x = b.pick(lambda v: v.rank >= 1)
    if x is None:
        return False
    axis = b.randint(0, x.rank - 1)
    n = x.shape[axis]
    index_shape = b.choice(((), (1,), (2,), (3,), (5,), (2, 3)))
    indices = b.rng.integers(-n, n, index_shape)
    out_shape = x.shape[:axis] + tuple(index_shape) + x.shape[axis + 1:]
    if numel(out_shape) > MAX_ELEMENTS or len(out_shape) > MAX_RANK or not out_shape:
        return False
    (out,) = b.node("Gather", [x.name, b.ints(indices)], axis=b.axis(x.rank, axis))
    flat = frozenset(i if i < axis else i + len(index_shape) - 1
                     for i in x.flat if i != axis)
    b.add(out, out_shape, rms=x.rms, flat=flat, exact=x.exact)
    return True


def op_expand(b: Builder) -> bool:
    x = b.pick(lambda v: 1 in v.shape or v.rank < 3)
    if x is None:
        return False
    lead = b.randint(0, 1) if x.rank < MAX_RANK else 0
    target = [b.choice((2, 3)) for _ in range(lead)]
    for extent in x.shape:
        if extent == 1:
            target.append(b.choice((1, 2, 3, 4, 7)))
        else:
            target.append(extent if b.chance(0.7) else 1)  # 1: keep the input's extent
    out_shape = broadcast(x.shape, target)
    if out_shape is None or out_shape == x.shape or numel(out_shape) > MAX_ELEMENTS:
        return False
    (out,) = b.node("Expand", [x.name, b.ints(target)])
    flat = set(stretched_axes(x.shape, out_shape)) | {a + len(out_shape) - x.rank
                                                        for a in x.flat}
    b.add(out, out_shape, rms=x.rms, flat=frozenset(flat), exact=x.exact)
    return True


def op_tile(b: Builder) -> bool:
    x = b.pick(lambda v: v.rank >= 1)
    if x is None:
        return False
    repeats = [b.choice((1, 1, 2, 3)) for _ in x.shape]
    out_shape = tuple(e * r for e, r in zip(x.shape, repeats))
    if numel(out_shape) > MAX_ELEMENTS:
        return False
    (out,) = b.node("Tile", [x.name, b.ints(repeats)])
    b.add(out, out_shape, rms=x.rms, flat=x.flat, exact=x.exact)
    return True


__all__ = ["op_concat", "op_expand", "op_gather", "op_pad", "op_reshape", "op_slice", "op_split",
           "op_squeeze", "op_tile", "op_transpose"]
