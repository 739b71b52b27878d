"""Issue 31's no-GPU goals for CUDA kernels, checked on suite models built all on
``cuda@sm_90``: no convolution, matmul, depthwise or pooling kernel on dlight's catch-all
rules, scheduled work within 1.3x of the layer's, no register spills (nvcc), threads and shared
memory within sm_90's limits, and every kernel over 10 MFLOP on at least one block per SM."""

import shutil

import pytest

import tvm_hetero as th
from tvm_hetero.target import cuda_multiprocessors
from tvm_hetero.testing.gpu_census import GOALS, KernelRow, census, misses
from tvm_hetero.testing.suite import SUITE

ARCH = "sm_90"
# small suite models that reach every heavy kind: dense at batch 8, attention, depthwise
# convolutions with squeeze-and-excite, grouped convolutions, max and average pooling
QUICK = ("mlp_b8", "bert_layer", "mobilenet_v3_block", "efficientnet_block", "squeezenet")
# the rest of the suite (several minutes)
REST = tuple(name for name in SUITE if name not in QUICK)

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


def _missed(name: str) -> list[str]:
    proto, _ = SUITE[name]()
    rows, _ = census(th.load_model(proto, name=name), ARCH,
                     with_nvcc=shutil.which("nvcc") is not None)
    assert rows, f"{name}: no CUDA kernel"
    sms = cuda_multiprocessors(ARCH)
    return [f"{name}: {row.kernel} ({row.kind}, {row.rule}): {'; '.join(problems)}"
            for row in rows if (problems := misses(row, sms, ARCH))]


@pytest.mark.parametrize("name", QUICK)
def test_cuda_kernels_meet_the_goals(name):
    assert _missed(name) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", REST)
def test_cuda_kernels_of_the_rest_of_the_suite_meet_the_goals(name):
    assert _missed(name) == []


def test_each_goal_is_reported():
    sms = cuda_multiprocessors(ARCH)
    fine = KernelRow("k", "conv2d", "tvm_hetero.gpu.x", mflop=100.0, scheduled_mflop=110.0,
                     blocks=sms, threads=256, registers=64, spill_bytes=0, shared_bytes=4096)
    assert misses(fine, sms, ARCH) == []
    broken = KernelRow("k", "pooling", "dlight.gpu.Fallback", mflop=100.0,
                       scheduled_mflop=100.0 * GOALS.max_work * 2, blocks=sms - 1,
                       threads=2048, registers=255, spill_bytes=8, shared_bytes=64 << 10)
    found = " | ".join(misses(broken, sms, ARCH))
    for words in ("heavy kernel on Fallback", "work 2.6x", "spills 8 B",
                  f"{sms - 1} blocks < {sms} SMs", "2048 threads > 1024", "B shared >"):
        assert words in found, found


@needs_nvcc
def test_nvcc_resources_read_registers_spills_and_shared_memory():
    from tvm_hetero.testing.gpu_census import nvcc_resources

    source = """
extern "C" __global__ void __launch_bounds__(128) tile_kernel(float* out, const float* in) {
  __shared__ float tile[1024];
  tile[threadIdx.x] = in[blockIdx.x * 128 + threadIdx.x];
  __syncthreads();
  out[blockIdx.x * 128 + threadIdx.x] = tile[127 - threadIdx.x] * 2.0f;
}
"""
    found = nvcc_resources(source, ARCH)
    assert found["tile_kernel"]["shared_bytes"] == 4096
    assert found["tile_kernel"]["spill_bytes"] == 0
    assert 0 < found["tile_kernel"]["registers"] <= 32


def _activation_times_vector():
    """[2048, 1024] x [1024, 1]: dlight's GEMV stages 16,384 floats of the activation (64 KiB)
    in shared memory, over sm_90's 48 KiB."""
    from tvm import te

    data = te.placeholder((2048, 1024), name="data")
    weight = te.placeholder((1024, 1), name="weight")
    k = te.reduce_axis((0, 1024), name="k")
    out = te.compute((2048, 1), lambda i, j: te.sum(data[i, k] * weight[k, j], axis=k))
    return te.create_prim_func([data, weight, out]).with_attr("tirx.noalias", True)


def test_a_kernel_over_the_gpus_shared_memory_goes_to_the_next_rule():
    from tvm_hetero.optimize.gpu import DlightRule
    from tvm_hetero.optimize.gpu.limits import within_gpu_limits
    from tvm_hetero.optimize.pass_ import optimize_function
    from tvm_hetero.optimize.table import default_table

    target = th.DeviceSet.parse([f"cuda@{ARCH}"])[0].tvm_target()
    func = _activation_times_vector()
    gemv = DlightRule("gpu", "GEMV").apply(func, target)
    assert gemv is not None and not within_gpu_limits(gemv, target)
    table = default_table().with_rules("cuda", "matmul", [DlightRule("gpu", "GEMV"),
                                                          DlightRule("gpu", "Fallback")])
    scheduled, rule = optimize_function(func, target, "activation_times_vector", table)
    assert rule == "dlight.gpu.Fallback"
    assert within_gpu_limits(scheduled, target)
