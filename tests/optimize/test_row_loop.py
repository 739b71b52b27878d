"""Kernels over symbolic rows (optimize.row_loop): which kernels qualify, the chunk sizes, and
row loops built and run at every remainder against numpy."""

import numpy as np
import pytest
import tvm
from tvm import te, tirx, topi

from tvm_hetero.devices import host_cpu_name, host_num_cores
from tvm_hetero.optimize.cpu.packed_weights import PACKED_WEIGHTS_ATTR
from tvm_hetero.optimize.pass_ import ROW_CHUNKS, optimize_function
from tvm_hetero.optimize.repack import _layout, pack_weight
from tvm_hetero.optimize.row_loop import (MAX_CHUNK, MIN_CHUNK_FLOPS, MIN_WEIGHT_REUSE,
                                          WEIGHT_CHUNK, chunk_levels, row_axes,
                                          rows_independent, schedule_rows)
from tvm_hetero.relax_ir import OP_KINDS_ATTR

TARGET = tvm.target.Target({"kind": "llvm", "mcpu": host_cpu_name(),
                            "num-cores": host_num_cores()})


def i64(value):
    return tirx.IntImm("int64", value)


def _func(tensors, kinds):
    return te.create_prim_func(tensors).with_attr(OP_KINDS_ATTR, kinds) \
        .with_attr("target", TARGET)


def matmul_bias(rows, k=64, n=48):
    """``[rows, k] x [k, n] + bias``; `rows` a list of dimensions (their product the rows)."""
    a = te.placeholder((*rows, i64(k)), "float32", name="A")
    w = te.placeholder((i64(k), i64(n)), "float32", name="W")
    b = te.placeholder((i64(n),), "float32", name="B")
    r = te.reduce_axis((i64(0), i64(k)), name="r")
    c = te.compute((*rows, i64(n)), lambda *i: te.sum(a[(*i[:-1], r)] * w[r, i[-1]], axis=r),
                   name="C")
    d = te.compute((*rows, i64(n)), lambda *i: c[i] + b[i[-1]], name="D")
    return _func([a, w, b, d], ["matmul", "add"])


def _run(func, arrays, out_shape):
    lib = tvm.compile(tvm.IRModule({"main": func}), target=TARGET)
    dev = tvm.cpu()
    out = tvm.runtime.empty(out_shape, "float32", dev)
    lib["main"](*[tvm.runtime.tensor(a, dev) for a in arrays], out)
    return out.numpy()


def _scheduled(func):
    scheduled, rule = optimize_function(func, TARGET, "k")
    assert rule is not None and rule.startswith(ROW_CHUNKS), rule
    return scheduled, rule


def _weight_for(scheduled, weight):
    attr = scheduled.attrs.get(PACKED_WEIGHTS_ATTR) if scheduled.attrs is not None else None
    if attr is None:
        return weight
    lanes, axis, blocks = _layout(attr)
    return pack_weight(weight, lanes, axis, blocks)


def test_matmul_rows_right_at_every_remainder():
    n = tirx.Var("n", "int64")
    scheduled, rule = _scheduled(matmul_bias([n], k=256, n=256))
    assert rule == ROW_CHUNKS + "packed-matmul"
    levels = chunk_levels(2 * 256 * 256 + 256, 256 * 256 + 256)
    assert levels[0] > 1 and levels[-1] == 1
    rng = np.random.default_rng(0)
    w = rng.standard_normal((256, 256)).astype("float32")
    b = rng.standard_normal(256).astype("float32")
    # every chunk size alone, each with each smaller one after it, and none at all
    for rows in sorted({0, 1, 2, 3, *levels, levels[0] + 1, 2 * levels[0] + levels[1] + 3,
                        levels[0] - 1}):
        a = rng.standard_normal((rows, 256)).astype("float32")
        got = _run(scheduled, [a, _weight_for(scheduled, w), b], (rows, 256))
        np.testing.assert_allclose(got, a @ w + b, rtol=1e-4, atol=1e-4, err_msg=str(rows))


@pytest.mark.parametrize("rows_dims", [1, 2])
def test_rows_below_the_smallest_chunk_run_padded(rows_dims):
    """Where no rule schedules the small chunks alike, the last chunk size takes the rest on
    zero-padded copies of its rows."""
    dims = [tirx.Var("b", "int64"), tirx.Var("s", "int64")][-rows_dims:]
    func = matmul_bias(dims, k=64, n=48)

    def schedule(static, first):  # chunks of 8 rows and more only
        if int(static.params[0].ty.shape[-2]) < 8:
            return None
        scheduled, rule = optimize_function(static, TARGET, "k")
        return (scheduled, rule) if rule is not None else None

    scheduled, rule = schedule_rows(func, schedule)
    assert "padded_tail" in scheduled.script()
    rng = np.random.default_rng(3)
    w = rng.standard_normal((64, 48)).astype("float32")
    b = rng.standard_normal(48).astype("float32")
    shapes = [(rows,) for rows in (1, 7, 8, 9, 31, 77)] if rows_dims == 1 else [
        (1, 3), (3, 5), (2, 9)]
    for shape in shapes:
        a = rng.standard_normal((*shape, 64)).astype("float32")
        got = _run(scheduled, [a, _weight_for(scheduled, w), b], (*shape, 48))
        np.testing.assert_allclose(got, a @ w + b, rtol=1e-4, atol=1e-4, err_msg=str(shape))


def test_rows_over_two_dimensions():
    """``[batch, seq, k]``: the rows are batch x seq, a chunk may straddle two batches."""
    batch, seq = tirx.Var("batch", "int64"), tirx.Var("seq", "int64")
    func = matmul_bias([batch, seq], k=64, n=48)
    assert [str(v) for v in row_axes(func)[0]] == ["batch", "seq"]
    scheduled, _ = _scheduled(func)
    rng = np.random.default_rng(1)
    w = rng.standard_normal((64, 48)).astype("float32")
    b = rng.standard_normal(48).astype("float32")
    for shape in [(1, 1), (3, 7), (2, 40), (5, 13)]:
        a = rng.standard_normal((*shape, 64)).astype("float32")
        got = _run(scheduled, [a, _weight_for(scheduled, w), b], (*shape, 48))
        np.testing.assert_allclose(got, a @ w + b, rtol=1e-4, atol=1e-4, err_msg=str(shape))


def _conv(images):
    """A 3x3 convolution of padding 1 over [images, 8, 10, 10], int64 throughout."""
    data = te.placeholder((images, i64(8), i64(10), i64(10)), "float32", name="data")
    kernel = te.placeholder((i64(16), i64(8), i64(3), i64(3)), "float32", name="kernel")
    pad = te.compute((images, i64(8), i64(12), i64(12)), lambda b, c, h, w: tirx.if_then_else(
        tirx.all(h >= 1, h < 11, w >= 1, w < 11), data[b, c, h - 1, w - 1], 0.0), name="pad")
    rc, rh, rw = (te.reduce_axis((i64(0), i64(e)), name=f"r{i}") for i, e in enumerate((8, 3, 3)))
    conv = te.compute((images, i64(16), i64(10), i64(10)), lambda b, o, h, w: te.sum(
        pad[b, rc, h + rh, w + rw] * kernel[o, rc, rh, rw], axis=[rc, rh, rw]), name="conv")
    return _func([data, kernel, conv], ["conv2d"])


def test_convolution_batch_one_image_at_a_time():
    scheduled, _ = _scheduled(_conv(tirx.Var("n", "int64")))
    rng = np.random.default_rng(2)
    k = rng.standard_normal((16, 8, 3, 3)).astype("float32")
    for images in (1, 3):
        x = rng.standard_normal((images, 8, 10, 10)).astype("float32")
        want = _run(_conv(i64(images)), [x, k], (images, 16, 10, 10))
        got = _run(scheduled, [x, _weight_for(scheduled, k)], (images, 16, 10, 10))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_chunk_sizes():
    # a large row (a convolution's image): one row a chunk
    assert chunk_levels(1e9, 1000) == [1]
    # small rows: the least power of two of enough work, then four times smaller, down to 1
    assert chunk_levels(MIN_CHUNK_FLOPS / 16, 1) == [16, 4, 1]
    assert chunk_levels(1.0, 0)[0] == MAX_CHUNK
    # a row that uses its weights little (a linear layer, ViT's [768, 2304] projection): they
    # are read once per chunk, so large chunks, then halves (at most one chunk of each)
    assert chunk_levels(2 * 768 * 2304, 768 * 2304) == [WEIGHT_CHUNK >> i for i in range(9)]
    # a convolution's row (an image) uses each weight element often: one row a chunk
    assert chunk_levels(MIN_WEIGHT_REUSE * 10 ** 6, 10 ** 6) == [1]


def _declines(func):
    found = row_axes(func)
    return found is None or not rows_independent(func, found[0])


def test_kernels_whose_rows_are_not_independent_are_not_row_loops():
    n = tirx.Var("n", "int64")
    x = te.placeholder((n, i64(8)), "float32", name="x")
    r = te.reduce_axis((i64(0), n), name="r")
    over_rows = te.compute((i64(8),), lambda j: te.sum(x[r, j], axis=r), name="s")
    shifted = te.compute((n - 1, i64(8)), lambda i, j: x[i + 1, j], name="shift")
    transposed = te.compute((i64(8), n), lambda j, i: x[i, j], name="t")
    square = te.placeholder((n, n), "float32", name="sq")
    squared = te.compute((n, n), lambda i, j: square[i, j] * 2.0, name="sq2")
    table = te.placeholder((i64(512), i64(8)), "float32", name="pos")
    positions = te.compute((n, i64(8)), lambda i, j: x[i, j] + table[i, j], name="p")
    iota = te.compute((n, i64(8)), lambda i, j: x[i, j] + i.astype("float32"), name="iota")
    softmax = topi.nn.softmax(x, axis=0)
    cases = {"a sum over the rows": [x, over_rows], "a shifted row": [x, shifted],
             "rows as the last axis": [x, transposed], "[n, n]": [square, squared],
             "the row indexing a weight": [x, table, positions],
             "the row as a value": [x, iota], "a softmax over the rows": [x, softmax]}
    for name, tensors in cases.items():
        func = _func(tensors, ["other"])
        assert _declines(func), name
        _, rule = optimize_function(func, TARGET, name)
        assert rule is None or not rule.startswith(ROW_CHUNKS), name
    # and the same kernels over static rows are row loops' material
    assert not _declines(_func([x, te.compute((n, i64(8)), lambda i, j: x[i, j] * 2.0)],
                               ["elementwise"]))


@pytest.mark.parametrize("rows", [1, 5])
def test_static_kernels_are_untouched(rows):
    _, rule = optimize_function(matmul_bias([i64(rows)]), TARGET, "k")
    assert rule is not None and not rule.startswith(ROW_CHUNKS)


def _conv_net():
    """Three 3x3 convolutions over [batch, 16, 32, 32] (about 120 MFLOP an image)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(4)
    nodes, weights, last = [], [], "x"
    for i, (cin, cout) in enumerate(((16, 32), (32, 64), (64, 64))):
        weights += [numpy_helper.from_array(
            (rng.standard_normal((cout, cin, 3, 3)) * 0.1).astype("float32"), f"w{i}"),
            numpy_helper.from_array(rng.standard_normal(cout).astype("float32"), f"b{i}")]
        nodes += [helper.make_node("Conv", [last, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1] * 4),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        last = f"r{i}"
    graph = helper.make_graph(
        nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                       ["batch", 16, 32, 32])],
        [helper.make_tensor_value_info(last, TensorProto.FLOAT, ["batch", 64, 32, 32])],
        weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_batch_range_runs_blocked_convolutions_image_by_image():
    """Over a batch range the convolutions take the blocked layout and its rule, one image a
    chunk, as a static batch does; right at several batches against onnxruntime."""
    import tvm_hetero as th
    from tvm_hetero.testing import onnx_reference

    source = _conv_net()
    model = th.load_model(source, shape_ranges={"batch": "1:8:4"})
    devices = th.DeviceSet.parse(["cpu"])
    layers = th.extract_layers(model, th.PrepareConfig.for_devices(devices))
    compiled = th.build(model, th.Placement.all_on(layers, "cpu"), devices)
    rules = compiled.stats.rules
    convs = [r for name, r in rules.items() if "conv2d" in name]
    assert len(convs) == 3 and all(r == ROW_CHUNKS + "blocked-nchwc" for r in convs), rules
    rng = np.random.default_rng(5)
    for batch in (1, 3, 8):
        x = rng.standard_normal((batch, 16, 32, 32)).astype("float32")
        (got,), (want,) = compiled.run({"x": x}), onnx_reference(source, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
