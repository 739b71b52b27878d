"""CUDA kernels compiled ahead of the GPU run, served to TVM's runtime from disk.

An exported library built by TVM 0.27 for ``cuda`` carries CUDA source; the runtime compiles
it when the library is loaded, through the global function ``tvm_callback_cuda_compile``
(``tvm.support.nvcc`` registers one, but that module needs TVM's compiler). This module
registers a callback that answers from a folder of fatbins keyed by the source, the arch and
the nvcc options, so that a library compiled here with ``nvcc`` loads on the GPU machine
without compiling; a key not in the folder is compiled with ``nvcc`` when one is allowed.

Imports only the standard library and ``tvm_ffi``: it serves both sides.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time

# TVM's own nvcc options (tvm.support.nvcc._compile_cuda_nvcc with its defaults), fatbin
NVCC_OPTIONS = ("-O3", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
                "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
                "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
                "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math",
                "--ptxas-options=--register-usage-level=10")


def kernel_key(code: str, arch: str) -> str:
    """The file name of a kernel source's fatbin: a hash of source, arch and options."""
    digest = hashlib.sha256()
    for part in (code, arch, *NVCC_OPTIONS):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:32] + ".fatbin"


def nvcc_fatbin(code: str, arch: str, nvcc: str = "nvcc") -> bytes:
    """Compile CUDA source to a fatbin for `arch` (``sm_90``) with TVM's nvcc options."""
    suffix = arch.removeprefix("sm_")
    with tempfile.TemporaryDirectory(prefix="gpu_check_nvcc_") as tmp:
        source, target = os.path.join(tmp, "k.cu"), os.path.join(tmp, "k.fatbin")
        with open(source, "w") as f:
            f.write(code)
        cmd = [nvcc, "--fatbin", "-gencode", f"arch=compute_{suffix},code=sm_{suffix}",
               *NVCC_OPTIONS, "-o", target, source]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:  # its errors, without the warnings
            errors = [line for line in (proc.stdout + proc.stderr).splitlines()
                      if "error" in line.lower()]
            raise RuntimeError(f"nvcc -arch={arch} failed: "
                               + (" | ".join(errors[:5]) or proc.stderr[-500:]))
        with open(target, "rb") as f:
            return f.read()


def error_line(err: BaseException) -> str:
    """The line of an error raised through TVM's loader that says what failed."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    for line in lines:
        if "nvcc" in line or "CUDA kernels not in" in line:
            return line[line.find("nvcc") if "nvcc" in line else 0:][:400]
    return (lines[-1] if lines else type(err).__name__)[:400]


class KernelStore:
    """The callback TVM's CUDA runtime compiles through, answering from `directory`.

    Parameters
    ----------
    directory : str
        Folder of ``<kernel_key>.fatbin`` files.
    arch : str
        The CUDA arch the fatbins are for (``sm_90``).
    compile : bool
        Compile a source not in the folder with ``nvcc`` (and store it); otherwise raise.
    """

    def __init__(self, directory: str, arch: str, compile: bool):
        self.directory = directory
        self.arch = arch
        self.compile = compile
        self.hits = 0
        self.compiled = 0
        self.compile_s = 0.0
        self.nvcc = shutil.which("nvcc") or "nvcc"

    def __call__(self, code, *_):
        code = str(code)
        path = os.path.join(self.directory, kernel_key(code, self.arch))
        if os.path.isfile(path):
            self.hits += 1
            with open(path, "rb") as f:
                return bytearray(f.read())
        if not self.compile:
            raise RuntimeError(f"CUDA kernels not in {self.directory} ({os.path.basename(path)})"
                               " and compiling is off")
        start = time.perf_counter()
        data = nvcc_fatbin(code, self.arch, self.nvcc)
        self.compile_s += time.perf_counter() - start
        self.compiled += 1
        os.makedirs(self.directory, exist_ok=True)
        with open(path + ".partial", "wb") as f:
            f.write(data)
        os.replace(path + ".partial", path)
        return bytearray(data)

    def install(self) -> "KernelStore":
        """Register this store as ``tvm_callback_cuda_compile`` (replacing TVM's)."""
        import tvm_ffi

        tvm_ffi.register_global_func("tvm_callback_cuda_compile", self, override=True)
        return self
