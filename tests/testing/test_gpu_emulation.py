"""GPU schedules checked for wrong answers without a GPU (tvm_hetero.testing.gpu_emulation):
kernels scheduled by each dlight GPU rule the suite reaches compute the unscheduled kernel's
values once emulated on the CPU, and schedules broken on purpose (a bound loop's extent
changed, a predicate dropping part of an output, a fetch that misses part of its tile) are
reported. Everything builds for LLVM; nothing needs a GPU."""

import pytest
import tvm_ffi
from tvm import te, tirx, topi
from tvm.script import tirx as T

from tvm_hetero.optimize.gpu.dlight import DlightRule
from tvm_hetero.target import cuda_target
from tvm_hetero.testing.gpu_emulation import (CannotEmulate, ScheduleMismatch, buffer_errors,
                                              check_gpu_schedule, cuda_build_kernels,
                                              emulate_on_cpu, index_bounds, is_gpu_scheduled,
                                              random_arguments, thread_extents)
from tvm_hetero.testing.suite import bert_layer, llama_decode

TARGET = cuda_target("sm_90")


def schedule(func, rule):
    """`func` scheduled for sm_90 by dlight's GPU rule `rule`, which must take it."""
    import tvm

    scheduled = DlightRule("gpu", rule).apply(func, tvm.target.Target(TARGET))
    assert scheduled is not None, f"dlight {rule} declined the kernel"
    assert is_gpu_scheduled(scheduled)
    return scheduled


def dense(m, n, k):
    """y = relu(x @ w^T + b): x [m, k], w [n, k]."""
    x = te.placeholder((m, k), name="x")
    w = te.placeholder((n, k), name="w")
    b = te.placeholder((n,), name="b")
    r = te.reduce_axis((0, k), "r")
    mm = te.compute((m, n), lambda i, j: te.sum(x[i, r] * w[j, r], axis=r), name="mm")
    y = te.compute((m, n), lambda i, j: te.max(mm[i, j] + b[j], 0.0), name="y")
    return te.create_prim_func([x, w, b, y])


def conv2d():
    """A 3x3 convolution, 16 to 24 channels at 10x10, padding 1, with a bias."""
    x = te.placeholder((1, 16, 10, 10), name="x")
    w = te.placeholder((24, 16, 3, 3), name="w")
    b = te.placeholder((1, 24, 1, 1), name="b")
    y = topi.add(topi.nn.conv2d_nchw(x, w, 1, 1, 1), b)
    return te.create_prim_func([x, w, b, y])


def depthwise():
    """A depthwise 3x3 convolution of 8 channels at 12x12 (dlight's Fallback takes it)."""
    x = te.placeholder((1, 8, 12, 12), name="x")
    w = te.placeholder((8, 1, 3, 3), name="w")
    return te.create_prim_func([x, w, topi.nn.depthwise_conv2d_nchw(x, w, 1, 1, 1)])


def row_sums():
    """Sums of 32 rows of 300 (dlight's Reduction)."""
    x = te.placeholder((32, 300), name="x")
    r = te.reduce_axis((0, 300), "r")
    return te.create_prim_func([x, te.compute((32,), lambda i: te.sum(x[i, r], axis=r))])


def softmax(columns=100):
    x = te.placeholder((6, columns), name="x")
    return te.create_prim_func([x, topi.nn.softmax(x)])


def layer_norm():
    x = te.placeholder((4, 96), name="x")
    gamma = te.placeholder((96,), name="gamma")
    beta = te.placeholder((96,), name="beta")
    return te.create_prim_func([x, gamma, beta, topi.nn.layer_norm(x, gamma, beta, [1], 1e-5)])


def select_ints():
    """Integer and boolean buffers: where(mask, a + b, a), and a < b (dlight's Fallback)."""
    a = te.placeholder((37, 5), "int32", name="a")
    b = te.placeholder((37, 5), "int32", name="b")
    mask = te.placeholder((37, 5), "bool", name="mask")
    out = te.compute((37, 5), lambda i, j: te.if_then_else(mask[i, j], a[i, j] + b[i, j],
                                                            a[i, j]), name="out")
    less = te.compute((37, 5), lambda i, j: a[i, j] < b[i, j], name="less")
    return te.create_prim_func([a, b, mask, out, less])


@pytest.mark.parametrize("make, rule", [
    (lambda: dense(64, 96, 128), "Matmul"),
    (lambda: dense(8, 200, 256), "Matmul"),  # rows and columns padded to the tile
    (conv2d, "Matmul"),  # implicit GEMM, im2col inlined into the fetch
    (lambda: dense(1, 256, 512), "GEMV"),
    (row_sums, "Reduction"),
    (softmax, "GeneralReduction"),
    (layer_norm, "GeneralReduction"),
    (depthwise, "Fallback"),
    (select_ints, "Fallback"),
], ids=["matmul-dense", "matmul-padded", "matmul-conv", "gemv", "reduction", "softmax",
        "layer-norm", "fallback-depthwise", "fallback-ints"])
def test_dlight_schedules_compute_the_right_values(make, rule):
    func = make()
    error = check_gpu_schedule(func, schedule(func, rule))
    assert error <= 1e-5


def test_emulation_is_serial_global_and_leaves_the_schedule_alone():
    func = dense(64, 96, 128)
    scheduled = schedule(func, "Matmul")
    before = scheduled.script()
    emulated = emulate_on_cpu(scheduled)
    assert scheduled.script() == before
    assert not is_gpu_scheduled(emulated)
    text = emulated.script()
    assert 'scope="shared"' in before and 'scope="local"' in before
    assert "scope=" not in text and "thread_binding" not in text and "target" not in text


def _with_extent(func, loop, extent, which=0):
    """`func` with the `which`-th loop (in program order) bound to the thread axis `loop`, or
    serial and named `loop`, given `extent`."""
    found = []

    def visit(node):
        if isinstance(node, tirx.For) and (
                str(node.thread_binding.thread_tag) == loop if node.thread_binding is not None
                else node.loop_var.name == loop):
            found.append(node)
        return node

    tvm_ffi.structural_map(func.body, visit, order="pre")
    chosen = found[which]

    def change(node):
        if node.same_as(chosen):
            return tirx.For(node.loop_var, node.min, tirx.IntImm(node.extent.ty, extent),
                            node.kind, node.body, node.thread_binding, node.annotations)
        return node

    return tvm_ffi.structural_map(func, (tirx.For, change), order="pre")


def test_a_bound_loop_cut_short_is_caught():
    # 96 columns on blockIdx.y tiles of 64: one tile fewer leaves columns 64..95 unwritten
    func = dense(64, 96, 128)
    scheduled = schedule(func, "Matmul")
    assert check_gpu_schedule(func, scheduled) <= 1e-5
    broken = _with_extent(scheduled, "blockIdx.y", 1)
    with pytest.raises(ScheduleMismatch, match="buffer y"):
        check_gpu_schedule(func, broken)


def test_a_fetch_missing_part_of_its_tile_is_caught():
    # the cooperative fetch of x into shared memory with one of its two serial steps per
    # thread: the compute reads shared memory nobody wrote
    func = dense(64, 96, 128)
    scheduled = schedule(func, "Matmul")
    assert "for ax0_ax1_ax2_fused_2 in range(2)" in scheduled.script()
    broken = _with_extent(scheduled, "ax0_ax1_ax2_fused_2", 1)
    with pytest.raises(ScheduleMismatch, match="buffer y"):
        check_gpu_schedule(func, broken)


def test_a_reduction_over_part_of_its_range_is_caught():
    # softmax's sum of exponentials over rows of 700 (256 threads, 3 serial steps each) with
    # two of the steps
    func = softmax(700)
    scheduled = schedule(func, "GeneralReduction")
    assert check_gpu_schedule(func, scheduled) <= 1e-5
    broken = _with_extent(scheduled, "ax1_fused_0", 2, which=1)
    assert "T.serial(2" in broken.script()
    with pytest.raises(ScheduleMismatch, match="T_softmax_norm"):
        check_gpu_schedule(func, broken)
    assert buffer_errors(func, broken)["T_softmax_norm"] > 0.01


def test_thread_loops_of_uneven_extents_are_wrong():
    # a fetch nest on 8 of the block's 16 threadIdx.y: the GPU launches one extent per axis
    # (8 or 16, leaving threads out either way): reported as such, before any values
    func = dense(64, 96, 128)
    broken = _with_extent(schedule(func, "Matmul"), "threadIdx.y", 8, which=1)
    with pytest.raises(ScheduleMismatch, match=r"threadIdx.y have different extents \(16, 8\)"):
        check_gpu_schedule(func, broken)


def test_two_launches_of_one_function_may_have_their_own_extents():
    # a two-output split: Fallback writes each output in a nest of its own (1024 + 512
    # columns: 32 and 16 blocks), and TVM builds each nest as a kernel of its own
    from tvm import te, topi

    data = te.placeholder((32, 1536), name="data")
    first, second = topi.split(data, [1024], axis=1)
    func = te.create_prim_func([data, first, second]).with_attr("tirx.noalias", True)
    scheduled = schedule(func, "Fallback")
    launches = thread_extents(scheduled)
    assert [launch["blockIdx.x"] for launch in launches] == [{32}, {16}]
    assert check_gpu_schedule(func, scheduled) == 0.0


def test_a_predicate_dropping_elements_is_caught():
    # Fallback's one-thread-per-element schedule predicates the last block (185 elements on
    # blocks of 1024 threads): a predicate one element short leaves the last element stale
    func = select_ints()
    scheduled = schedule(func, "Fallback")

    def shorten(node):
        if isinstance(node, tirx.LT) and isinstance(node.b, tirx.IntImm) and \
                node.b.value == 185:
            return tirx.LT(node.a, tirx.IntImm(node.b.ty, 184))
        return node

    broken = tvm_ffi.structural_map(scheduled, (tirx.LT, shorten))
    assert not broken.same_as(scheduled)
    with pytest.raises(ScheduleMismatch, match="int32|bool"):
        check_gpu_schedule(func, broken)


def test_fragment_scopes_and_gpu_intrinsics_are_refused_with_a_reason():
    @T.prim_func(s_tir=True)
    def fragment(a: T.Buffer((16, 16), "float16"), b: T.Buffer((16, 16), "float16")):
        frag = T.sblock_alloc_buffer((16, 16), "float16", scope="wmma.accumulator")
        for _tx in T.thread_binding(32, thread="threadIdx.x"):
            for i, j in T.grid(16, 16):
                with T.sblock("load"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    frag[vi, vj] = a[vi, vj]
            for i, j in T.grid(16, 16):
                with T.sblock("store"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    b[vi, vj] = frag[vi, vj]

    with pytest.raises(CannotEmulate, match="'wmma.accumulator'"):
        emulate_on_cpu(fragment)

    @T.prim_func(s_tir=True)
    def shuffled(a: T.Buffer((32,), "float32"), b: T.Buffer((32,), "float32")):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            with T.sblock("shuffle"):
                v = T.axis.spatial(32, tx)
                b[v] = T.tvm_warp_shuffle(T.uint32(0xFFFFFFFF), a[v], 0, 32, 32)

    with pytest.raises(CannotEmulate, match="tvm_warp_shuffle"):
        emulate_on_cpu(shuffled)


@pytest.mark.slow
def test_tensor_core_schedules_are_refused_with_a_reason():
    # dlight's Matmul tensorizes a float16 product (about a minute to schedule here)
    x = te.placeholder((128, 256), "float16", name="x")
    w = te.placeholder((256, 128), "float16", name="w")
    r = te.reduce_axis((0, 256), "r")
    y = te.compute((128, 128), lambda i, j: te.sum(
        x[i, r].astype("float32") * w[r, j].astype("float32"), axis=r), name="y")
    func = te.create_prim_func([x, w, y])
    with pytest.raises(CannotEmulate, match="wmma"):
        check_gpu_schedule(func, schedule(func, "Matmul"))


def test_a_barrier_between_thread_nests_orders_them():
    # a hand-written schedule: each thread stores one element into shared memory, a barrier,
    # then each reads its mirror (written by another thread): the thread loops are split at
    # the barrier, so that every store runs before the first read
    @T.prim_func(s_tir=True)
    def mirrored(a: T.Buffer((4, 64), "float32"), b: T.Buffer((4, 64), "float32")):
        s = T.sblock_alloc_buffer((4, 64), scope="shared")
        for bx in T.thread_binding(4, thread="blockIdx.x"):
            for ty in T.thread_binding(2, thread="threadIdx.y"):
                for tx in T.thread_binding(32, thread="threadIdx.x"):
                    with T.sblock("store"):
                        i = T.axis.spatial(4, bx)
                        j = T.axis.spatial(64, ty * 32 + tx)
                        s[i, j] = a[i, j]
                    T.tvm_storage_sync("shared")
                    with T.sblock("load"):
                        i = T.axis.spatial(4, bx)
                        j = T.axis.spatial(64, ty * 32 + tx)
                        b[i, j] = s[i, 63 - j]

    a = te.placeholder((4, 64), name="a")
    original = te.create_prim_func([a, te.compute((4, 64), lambda i, j: a[i, 63 - j])])
    assert check_gpu_schedule(original, mirrored) == 0.0


def test_a_barrier_the_emulation_cannot_order_is_refused():
    @T.prim_func(s_tir=True)
    def staged(a: T.Buffer((2, 64), "float32"), b: T.Buffer((2, 64), "float32")):
        s = T.sblock_alloc_buffer((2, 64), scope="shared")
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            for k in range(2):
                with T.sblock("store"):
                    i = T.axis.spatial(2, k)
                    j = T.axis.spatial(64, tx)
                    s[i, j] = a[i, j]
                T.tvm_storage_sync("shared")
                with T.sblock("load"):
                    i = T.axis.spatial(2, k)
                    j = T.axis.spatial(64, tx)
                    b[i, j] = s[i, 63 - j]

    with pytest.raises(CannotEmulate, match="barrier inside a thread-bound loop"):
        emulate_on_cpu(staged)


@pytest.mark.parametrize("make", [
    lambda: bert_layer(seq=16, d=64, heads=2, vocab=64),
    lambda: llama_decode(d=64, heads=2, ffn=96, layers=1, past=7),
], ids=["bert-layer", "llama-decode"])
def test_every_kernel_of_a_cuda_build_computes_the_right_values(make):
    # small instances of two suite models built all on cuda@sm_90: every kernel, whichever
    # rule scheduled it (the project's own GPU rules included), checked
    import tvm_hetero as th

    proto, _ = make()
    kernels = cuda_build_kernels(th.load_model(proto, name="small"))
    assert len(kernels) >= 5
    for kernel, (original, scheduled, rule) in kernels.items():
        assert check_gpu_schedule(original, scheduled) <= 1e-5, (kernel, rule)


def _mask_gather():
    """DistilBERT's mask gather as its dynamo export imports: [1, 128, 2] indices transposed,
    then gather_nd into a [1, 128] mask; the first index component is into a dimension of 1."""
    mask = te.placeholder((1, 128), "float32", name="mask")
    indices = te.placeholder((1, 128, 2), "int64", name="indices")
    out = topi.gather_nd(mask, topi.transpose(indices, (2, 0, 1)))
    return te.create_prim_func([mask, indices, out])


def test_integer_inputs_stay_within_the_dimensions_they_index():
    # the indices reach the gather through the transpose's buffer; a value of 1 into the
    # dimension of 1 read past the mask (the reference and the emulation then differed, as
    # undefined reads do: DistilBERT's te_gather_nd reported wrong)
    func = _mask_gather()
    assert index_bounds(func) == {"indices": 1}
    assert not random_arguments(func, seed=0)[1].any()
    scheduled = schedule(func, "Fallback")
    for seed in range(3):
        assert check_gpu_schedule(func, scheduled, seed=seed) == 0.0
    # an embedding lookup: the ids index the table's rows (30522), up to 64
    table = te.placeholder((30522, 8), "float32", name="table")
    ids = te.placeholder((1, 16), "int64", name="ids")
    take = te.create_prim_func([table, ids, topi.take(table, ids, axis=0)])
    assert index_bounds(take) == {"ids": 30522}
    assert random_arguments(take, seed=0)[1].max() > 8  # not the smallest extent above 1


def test_a_launch_leaving_part_of_an_intermediate_unwritten_is_caught():
    # the separable resize in two launches (injective-stages): the columns, then the rows
    # that read them; the columns launch one block short. The emulation fills the kernel's
    # own float buffers first: the memory an earlier run freed held the right columns, and
    # the broken schedule passed
    import tvm

    from tvm_hetero.ops import resize
    from tvm_hetero.optimize.gpu.injective_stages import InjectiveStages

    x = te.placeholder((1, 4, 8, 8), "float32", name="x")
    tables = [te.placeholder((64,), dtype, name=f"{axis}_{part}")
              for axis in ("row", "col")
              for part, dtype in (("first", "int32"), ("second", "int32"), ("weight", "float32"))]
    func = te.create_prim_func([x, *tables, resize.separable_linear(x, *tables)])
    scheduled = InjectiveStages().apply(func, tvm.target.Target(TARGET))
    assert len(thread_extents(scheduled)) == 2
    assert check_gpu_schedule(func, scheduled) == 0.0

    def shorten(node):  # the first launch's block loop, one block short
        if isinstance(node, tirx.For) and node.thread_binding is not None \
                and str(node.thread_binding.thread_tag) == "blockIdx.x" and not done:
            done.append(node)
            return tirx.For(node.loop_var, node.min,
                            tirx.IntImm(node.extent.ty, node.extent.value - 1), node.kind,
                            node.body, node.thread_binding, node.annotations)
        return node

    done: list = []
    broken = tvm_ffi.structural_map(scheduled, (tirx.For, shorten), order="pre")
    assert done and int(done[0].extent) > 1
    with pytest.raises(ScheduleMismatch):
        check_gpu_schedule(func, broken)
