"""The disk cache of compiled CUDA (tvm_hetero.build.cuda_cache) in front of TVM's compile callback.

Without a GPU TVM compiles no CUDA at build time (the library keeps the source, compiled when a
GPU machine loads it); these tests send the build's CUDA through the registered callback the
way that load does, with nvcc (``TVM_CUDA_COMPILE_MODE=nvcc``), about 1-2 s a small kernel.
"""

from __future__ import annotations

import shutil

import pytest
import tvm
import tvm_ffi
from tvm.script import tirx as T

import tvm_hetero as th
from tvm_hetero.build import cuda_cache
from tvm_hetero.build.compile import BuildStats, KernelCache

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc on PATH")

SM90 = {"kind": "cuda", "arch": "sm_90"}


@pytest.fixture
def nvcc_mode(monkeypatch):
    monkeypatch.setenv("TVM_CUDA_COMPILE_MODE", "nvcc")
    monkeypatch.delenv(cuda_cache.ENV_CACHE_DIR, raising=False)


@pytest.fixture
def fresh_install():
    """No cache installed before or after the test (TVM's own callback registered)."""
    cuda_cache.uninstall()
    yield
    cuda_cache.uninstall()


def _tvm_callback():
    """TVM's own compile callback (whatever cache is installed in front of it)."""
    installed = cuda_cache.installed()
    return installed._compile if installed is not None else tvm_ffi.get_global_func(
        cuda_cache.CALLBACK)


def _add_source(value: float) -> str:
    """The CUDA source TVM generates for ``B = A + value`` on 128 threads."""

    @T.prim_func
    def add(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
        T.func_attr({"global_symbol": "add"})
        for i in T.thread_binding(128, "threadIdx.x"):
            B[i] = A[i] + T.float32(value)

    built = tvm.tirx.build(tvm.IRModule({"add": add}),
                           target=tvm.target.Target(SM90, host={"kind": "llvm"}))
    (cuda,) = cuda_cache.cuda_modules(built)
    return cuda.inspect_source("cuda")


def test_hit_returns_what_tvm_compiled_and_compiles_nothing(tmp_path, nvcc_mode):
    cache = cuda_cache.CudaCompileCache(_tvm_callback(), tmp_path)
    source = _add_source(1.0)
    with tvm.target.Target(SM90):
        first = cache(source)
        again = cache(source)
        direct = bytes(_tvm_callback()(source))
    assert first == again and len(first) > 0
    assert first[:4] == direct[:4]  # a fatbin, as TVM's callback makes in nvcc mode
    assert (cache.stats.compiles, cache.stats.hits) == (1, 1)
    assert [p.name for p in tmp_path.iterdir()] == [cache.path(cache.key(source, "9.0")).name]


def test_changed_source_arch_or_options_miss(tmp_path, nvcc_mode, monkeypatch):
    cache = cuda_cache.CudaCompileCache(_tvm_callback(), tmp_path)
    one, two = _add_source(1.0), _add_source(2.0)
    assert one != two
    with tvm.target.Target(SM90):
        cache(one)
        cache(two)  # another source
    with tvm.target.Target({"kind": "cuda", "arch": "sm_89"}):
        cache(one)  # another architecture
    monkeypatch.setenv("TVM_CUDA_PTXAS_REG_LEVEL", "5")
    with tvm.target.Target(SM90):
        cache(one)  # another compiler option
    assert (cache.stats.compiles, cache.stats.hits) == (4, 0)
    assert len(list(tmp_path.glob("*.bin"))) == 4
    monkeypatch.delenv("TVM_CUDA_PTXAS_REG_LEVEL")
    with tvm.target.Target(SM90):
        cache(one)
    assert (cache.stats.compiles, cache.stats.hits) == (4, 1)
    # the compiler is part of the key: nvrtc (not here) and nvcc never share an entry
    monkeypatch.setenv("TVM_CUDA_COMPILE_MODE", "nvrtc")
    nvrtc_key = cache.key(one, "9.0")
    monkeypatch.setenv("TVM_CUDA_COMPILE_MODE", "nvcc")
    assert nvrtc_key != cache.key(one, "9.0")


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty"])
def test_corrupt_entry_is_compiled_again(tmp_path, nvcc_mode, damage):
    cache = cuda_cache.CudaCompileCache(_tvm_callback(), tmp_path)
    source = _add_source(1.0)
    with tvm.target.Target(SM90):
        good = cache(source)
        path = cache.path(cache.key(source, "9.0"))
        data = path.read_bytes()
        if damage == "flip":
            data = data[:-1] + bytes([data[-1] ^ 0xFF])
        elif damage == "truncate":
            data = data[: len(data) // 2]
        else:
            data = b""
        path.write_bytes(data)
        again = cache(source)
        third = cache(source)
    assert again == good == third
    assert (cache.stats.compiles, cache.stats.corrupt, cache.stats.hits) == (2, 1, 1)


def test_install_honours_the_cache_dir_variable(tmp_path, nvcc_mode, monkeypatch,
                                                fresh_install):
    monkeypatch.setenv(cuda_cache.ENV_CACHE_DIR, str(tmp_path / "from-env"))
    cache = cuda_cache.install()
    assert cache.directory == tmp_path / "from-env"
    source = _add_source(3.0)
    compile = tvm_ffi.get_global_func(cuda_cache.CALLBACK)  # what TVM calls now
    with tvm.target.Target(SM90):
        compile(source)
        compile(source)
    assert len(list((tmp_path / "from-env").glob("*.bin"))) == 1
    assert (cache.stats.compiles, cache.stats.hits) == (1, 1)
    assert cuda_cache.install(tmp_path / "given") is cache  # installed once; the dir changes
    assert cache.directory == tmp_path / "given"
    cuda_cache.uninstall()
    monkeypatch.delenv(cuda_cache.ENV_CACHE_DIR)
    assert cuda_cache.CudaCompileCache(print).directory == \
        cuda_cache.DEFAULT_CACHE_DIR.expanduser()


def test_unwritable_cache_dir_still_compiles(tmp_path, nvcc_mode, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cache = cuda_cache.CudaCompileCache(_tvm_callback(), blocker / "cuda")
    with tvm.target.Target(SM90):
        assert len(cache(_add_source(1.0))) > 0
    assert cache.stats.compiles == 1
    assert "cannot write CUDA cache entry" in caplog.text


def test_second_identical_build_compiles_no_kernel(tmp_path, nvcc_mode, fresh_install):
    """Two builds, each with its own KernelCache (as two processes of a tune would have): one
    CUDA module per kernel; the second build's CUDA all comes from the disk cache."""
    cache = cuda_cache.install(tmp_path)
    counts = []
    for _ in range(2):
        stats = BuildStats()
        compiled = th.build("zoo:mlp", "all:cuda", ["cuda@sm_90"], kernel_cache=KernelCache(),
                            stats=stats)
        assert stats.cuda_compiles == 0  # no CUDA runtime here: the library keeps the source
        before = cache.snapshot()
        modules = cuda_cache.compile_module_sources(compiled.executable, arch="sm_90")
        done = cache.snapshot().since(before)
        counts.append((modules, done.compiles, done.hits))
    (modules, compiled_first, _), second = counts
    assert modules >= 2 and compiled_first == modules
    assert second == (modules, 0, modules)
    assert len(list(tmp_path.glob("*.bin"))) == modules


@pytest.mark.gpu
def test_build_stats_count_cuda_compiles_and_hits(tmp_path, fresh_install):
    """With a CUDA runtime TVM compiles at build time, through the cache."""
    cuda_cache.install(tmp_path)
    first, second = BuildStats(), BuildStats()
    th.build("zoo:mlp", "all:cuda", ["cuda"], kernel_cache=KernelCache(), stats=first)
    th.build("zoo:mlp", "all:cuda", ["cuda"], kernel_cache=KernelCache(), stats=second)
    assert first.cuda_compiles >= 2 and first.cuda_cache_hits == 0
    assert (second.cuda_compiles, second.cuda_cache_hits) == (0, first.cuda_compiles)
