"""Compiled CUDA kept on disk, one file per CUDA module: TVM's compile callback, cached.

TVM 0.27 turns CUDA source into a binary through one Python callback,
``tvm_callback_cuda_compile(source) -> bytes`` (``tvm.support.nvcc``: NVRTC to a cubin, or nvcc
to a fatbin with ``TVM_CUDA_COMPILE_MODE=nvcc``). It calls it once per CUDA module: at build
time where the CUDA runtime is present (``tirx.build`` of a ``cuda`` target), else when an
exported library carrying CUDA source is loaded on a GPU machine. A build with a
:class:`~tvm_hetero.build.compile.KernelCache` (a search's, a tune's) has one CUDA module per
kernel; a plain build has one for all the kernels of its target.

:func:`install` overrides that callback with :class:`CudaCompileCache`, which wraps the callback
it replaces (TVM's own) and changes nothing it returns: an entry is the bytes TVM's callback
returned, under a key hashing the CUDA source, the architecture the callback would compile for
(the current target's ``arch``, else the GPU's), the compile mode, the environment variables
TVM's callback reads for compiler options, the compiler's version and TVM's version. A second
build or load of the same source compiles nothing. Entries are written atomically (a temporary
file, then a rename); an entry that cannot be read or fails its checksum is compiled again and
rewritten.

The cache directory: the ``directory`` given to :func:`install`, else the environment variable
``TVM_HETERO_CACHE_DIR`` (read at each compile), else ``~/.cache/tvm_hetero/cuda``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

logger = logging.getLogger(__name__)

CALLBACK = "tvm_callback_cuda_compile"
ENV_CACHE_DIR = "TVM_HETERO_CACHE_DIR"
DEFAULT_CACHE_DIR = Path("~/.cache/tvm_hetero/cuda")
# environment variables tvm.support.nvcc reads when it compiles (they change its output)
COMPILE_ENV = ("TVM_CUDA_COMPILE_MODE", "TVM_CUDA_PTXAS_REG_LEVEL", "TVM_CUDA_PTXAS_EXTRA_OPTS",
               "TVM_CUDA_NVCC_NO_FAST_MATH", "TVM_CUDA_NVRTC_EXTRA_OPTS", "TVM_KERNEL_DEBUG",
               "CUDA_PATH")
_MAGIC = b"tvm_hetero.cuda.1\n"  # entry: magic, sha256 of the payload (hex) and "\n", payload
_DIGEST_LEN = 64


@dataclass
class CudaCacheStats:
    """What the cache did, counted since the process installed it.

    Attributes
    ----------
    compiles : int
        CUDA modules compiled by TVM's callback (misses; corrupt entries included).
    hits : int
        CUDA modules whose binary came from the disk.
    corrupt : int
        Entries that could not be read or failed their checksum, compiled again.
    uncached : int
        Compiles that bypassed the cache: TVM writes kernel files (``TVM_KERNEL_DUMP``, the
        ``cuda.kernels_output_dir`` pass option), or no architecture is known (TVM's callback
        then raises its own error).
    compile_s : float
        Seconds spent in TVM's callback.
    """

    compiles: int = 0
    hits: int = 0
    corrupt: int = 0
    uncached: int = 0
    compile_s: float = 0.0

    def since(self, before: "CudaCacheStats") -> "CudaCacheStats":
        """The counts from `before` (an earlier :meth:`CudaCompileCache.snapshot`) to these."""
        return CudaCacheStats(self.compiles - before.compiles, self.hits - before.hits,
                              self.corrupt - before.corrupt, self.uncached - before.uncached,
                              self.compile_s - before.compile_s)


class CudaCompileCache:
    """A disk cache in front of a CUDA compile callback (``source -> bytes``).

    Parameters
    ----------
    compile : callable
        The callback compiling on a miss (TVM's ``tvm_callback_cuda_compile``).
    directory : str or os.PathLike, optional
        Where entries live; None: ``$TVM_HETERO_CACHE_DIR``, else ``~/.cache/tvm_hetero/cuda``.
    """

    def __init__(self, compile: Callable[[str], Any],
                 directory: str | os.PathLike | None = None):
        self._compile = compile
        self._directory = None if directory is None else Path(directory)
        self._lock = threading.Lock()
        self.stats = CudaCacheStats()

    @property
    def directory(self) -> Path:
        """The directory entries are read from and written to now."""
        if self._directory is not None:
            return self._directory
        return Path(os.environ.get(ENV_CACHE_DIR) or DEFAULT_CACHE_DIR).expanduser()

    def snapshot(self) -> CudaCacheStats:
        """A copy of the counters (subtract with :meth:`CudaCacheStats.since`)."""
        with self._lock:
            return replace(self.stats)

    def key(self, source: str, arch: str) -> str:
        """The entry name of `source` compiled for `arch` (``"9.0"``) with the options and the
        compiler now in effect."""
        options = {name: os.environ.get(name) for name in COMPILE_ENV}
        mode = (options["TVM_CUDA_COMPILE_MODE"] or "nvrtc").lower()
        described = json.dumps({
            "source": hashlib.sha256(source.encode()).hexdigest(), "arch": arch,
            "mode": mode, "options": options, "compiler": compiler_version(mode),
            "tvm": _tvm_version(),
        }, sort_keys=True)
        return hashlib.sha256(described.encode()).hexdigest()

    def path(self, key: str) -> Path:
        """The file of entry `key`."""
        return self.directory / f"{key}.bin"

    def __call__(self, source: str) -> bytes:
        arch = _target_arch()
        if arch is None or _dumps_kernels():
            with self._lock:
                self.stats.uncached += 1
            return bytes(self._compile(source))
        path = self.path(self.key(source, arch))
        payload, corrupt = _read_entry(path)
        if payload is not None:
            with self._lock:
                self.stats.hits += 1
            logger.debug("CUDA binary from the cache: %s", path)
            return payload
        start = time.perf_counter()
        payload = bytes(self._compile(source))
        elapsed = time.perf_counter() - start
        with self._lock:
            self.stats.compiles += 1
            self.stats.corrupt += int(corrupt)
            self.stats.compile_s += elapsed
        logger.info("compiled CUDA (%d bytes of source) for %s in %.2fs%s", len(source), arch,
                    elapsed, " (the cached entry was corrupt)" if corrupt else "")
        _write_entry(path, payload)
        return payload

    def clear(self) -> None:
        """Remove the cache directory's entries."""
        directory = self.directory
        if directory.is_dir():
            for entry in directory.glob("*.bin"):
                entry.unlink(missing_ok=True)


_INSTALLED: CudaCompileCache | None = None
_INSTALL_LOCK = threading.Lock()


def install(directory: str | os.PathLike | None = None) -> CudaCompileCache:
    """Put the disk cache in front of TVM's CUDA compile callback (once per process).

    Parameters
    ----------
    directory : str or os.PathLike, optional
        The cache directory; None keeps the one in use (first time: ``$TVM_HETERO_CACHE_DIR``,
        else ``~/.cache/tvm_hetero/cuda``, read at each compile).

    Returns
    -------
    CudaCompileCache
        The installed cache (its ``stats`` count for the whole process).
    """
    import tvm_ffi

    global _INSTALLED
    with _INSTALL_LOCK:
        if _INSTALLED is None:
            import tvm.support.nvcc  # noqa: F401  (registers TVM's callback)

            cache = CudaCompileCache(tvm_ffi.get_global_func(CALLBACK), directory)
            tvm_ffi.register_global_func(CALLBACK, lambda source: cache(str(source)),
                                         override=True)
            _INSTALLED = cache
            logger.debug("CUDA compile cache installed (%s)", cache.directory)
        elif directory is not None:
            _INSTALLED._directory = Path(directory)
        return _INSTALLED


def uninstall() -> None:
    """Give TVM its own callback back (the one :func:`install` wrapped)."""
    import tvm_ffi

    global _INSTALLED
    with _INSTALL_LOCK:
        if _INSTALLED is not None:
            tvm_ffi.register_global_func(CALLBACK, _INSTALLED._compile, override=True)
            _INSTALLED = None


def installed() -> CudaCompileCache | None:
    """The installed cache, or None."""
    return _INSTALLED


def compile_module_sources(module, arch: str | None = None) -> int:
    """Compile the CUDA source of every CUDA module under `module` (a built executable, a
    ``tirx.build`` result) through the compile callback now registered, as TVM does when a GPU
    machine loads it; returns how many CUDA modules went through the callback.

    Where no CUDA runtime is present (no GPU), a build keeps CUDA source and compiles nothing:
    this compiles it here (nvcc with ``TVM_CUDA_COMPILE_MODE=nvcc``), which checks that it
    compiles and fills the cache ahead of the load.

    Parameters
    ----------
    module : tvm.runtime.Module or VMExecutable
    arch : str, optional
        ``"sm_90"``, ``"sm_90a"``...: compile for it (a target scope); None: the current target's,
        else the GPU's. A GPU machine loading a library compiles for its GPU's compute version
        (TVM's rule: ``9.0.a``, i.e. ``sm_90a``, on an H100/H200): fill a cache for that machine
        with that arch.
    """
    import tvm
    import tvm_ffi

    compile = tvm_ffi.get_global_func(CALLBACK)
    sources = [cuda.inspect_source("cuda") for cuda in cuda_modules(module)]
    scope = tvm.target.Target({"kind": "cuda", "arch": arch}) if arch else None
    if scope is not None:
        scope.__enter__()
    try:
        for source in sources:
            compile(source)
    finally:
        if scope is not None:
            scope.__exit__(None, None, None)
    return len(sources)


def cuda_modules(module) -> list:
    """The CUDA modules imported anywhere under `module` (an executable's ``mod`` included)."""
    found, stack = [], [getattr(module, "mod", module)]
    visited: list = []  # kept alive: ids of the wrappers ``imports`` makes must not be reused
    while stack:
        current = stack.pop()
        if any(current.same_as(seen) for seen in visited):
            continue
        visited.append(current)
        if current.kind == "cuda":
            found.append(current)
        stack.extend(current.imports)
    return found


# -- helpers -------------------------------------------------------------------------------
def _target_arch() -> str | None:
    """The compute version TVM's callback compiles for (its own rule: the current target's
    ``arch``, else the GPU's), or None when neither is known."""
    from tvm.support import nvcc
    from tvm.target import Target

    try:
        return nvcc.get_target_compute_version(Target.current(allow_none=True))
    except Exception:  # no arch and no GPU: TVM's callback raises its own error
        return None


def _dumps_kernels() -> bool:
    """Whether TVM's callback writes kernel files as it compiles (a hit would skip them)."""
    if os.environ.get("TVM_KERNEL_DUMP") is not None:
        return True
    import tvm_ffi

    context = tvm_ffi.get_global_func("transform.GetCurrentPassContext")()
    return "cuda.kernels_output_dir" in context.config


_VERSIONS: dict[str, str] = {}


def compiler_version(mode: str) -> str:
    """The version of the compiler TVM's callback uses in `mode` (``"nvcc"``: ``nvcc
    --version``'s release line, of the nvcc on ``PATH``; ``"nvrtc"``: ``nvrtcVersion()``), or
    ``"<mode>: unavailable"`` (TVM's callback then fails with its own error)."""
    if mode == "nvcc":
        nvcc = shutil.which("nvcc") or ""
        key = f"nvcc:{os.path.realpath(nvcc) if nvcc else ''}"
        if key not in _VERSIONS:
            try:
                out = subprocess.run([nvcc, "--version"], capture_output=True, text=True,
                                     check=True).stdout
                lines = [line for line in out.splitlines() if "release" in line]
                _VERSIONS[key] = lines[-1].strip() if lines else out.strip()
            except (OSError, subprocess.CalledProcessError):
                _VERSIONS[key] = "nvcc: unavailable"
        return _VERSIONS[key]
    if mode not in _VERSIONS:
        try:
            from cuda.bindings import nvrtc

            _, major, minor = nvrtc.nvrtcVersion()
            _VERSIONS[mode] = f"nvrtc {major}.{minor}"
        except Exception:
            _VERSIONS[mode] = f"{mode}: unavailable"
    return _VERSIONS[mode]


def _tvm_version() -> str:
    import tvm

    return tvm.__version__


def _read_entry(path: Path) -> tuple[bytes | None, bool]:
    """``(payload, False)`` for a good entry, ``(None, False)`` for none, ``(None, True)`` for
    one that cannot be read or fails its checksum."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None, False
    except OSError as err:
        logger.warning("cannot read CUDA cache entry %s (%s); compiling again", path, err)
        return None, True
    head = len(_MAGIC) + _DIGEST_LEN + 1
    if len(data) <= head or not data.startswith(_MAGIC):
        logger.warning("CUDA cache entry %s is corrupt; compiling again", path)
        return None, True
    digest, payload = data[len(_MAGIC):head - 1].decode("ascii", "replace"), data[head:]
    if hashlib.sha256(payload).hexdigest() != digest:
        logger.warning("CUDA cache entry %s fails its checksum; compiling again", path)
        return None, True
    return payload, False


def _write_entry(path: Path, payload: bytes) -> None:
    """Write an entry atomically; a cache that cannot be written is logged, not fatal."""
    data = _MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=path.stem, suffix=".tmp",
                                         delete=False) as out:
            tmp = out.name
            out.write(data)
        os.replace(tmp, path)
        tmp = None
    except OSError as err:
        logger.warning("cannot write CUDA cache entry %s (%s)", path, err)
    finally:
        if tmp is not None:
            try:
                os.remove(tmp)
            except OSError:
                pass
