"""TVM's runtime alone, with its CUDA part: what a GPU machine without TVM's compiler runs.

``import tvm`` with ``TVM_USE_RUNTIME_LIB=1`` (or without ``libtvm_compiler.so`` beside
``libtvm_runtime.so``) loads the runtime only, and then does not load the CUDA runtime
sidecar ``libtvm_runtime_cuda.so`` (TVM loads backends only with the compiler):
:func:`load_runtime` loads it, after the CUDA runtime library it needs (``libcudart.so.13``,
from the CUDA toolkit or from PyTorch's ``nvidia`` packages).
"""

from __future__ import annotations

import ctypes
import glob
import os
import site
import sys

CUDART = "libcudart.so.13"


def find_cudart() -> str | None:
    """A path of ``libcudart.so.13``: PyTorch's ``nvidia`` packages, then CUDA toolkits."""
    roots = [p for p in sys.path if p.endswith("-packages")] + site.getsitepackages()
    patterns = [os.path.join(root, "nvidia", "*", "lib", CUDART) for root in roots]
    patterns += [os.path.join(root, "nvidia", "*", "*", "lib", CUDART) for root in roots]
    patterns += [f"/usr/local/cuda*/lib*/{CUDART}", f"/usr/local/cuda*/targets/*/lib/{CUDART}",
                 f"/usr/lib/x86_64-linux-gnu/{CUDART}"]
    for pattern in patterns:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def load_runtime(cuda: bool = True):
    """Import TVM as runtime only and load its CUDA runtime.

    Returns
    -------
    tuple of (module, str or None)
        The ``tvm`` module, and why its CUDA runtime is absent (None when it loaded).
    """
    os.environ.setdefault("TVM_USE_RUNTIME_LIB", "1")
    import tvm
    from tvm.base import _LOADED_LIBS

    if not cuda:
        return tvm, "not asked for"
    runtime_dir = os.path.dirname(os.path.realpath(_LOADED_LIBS["tvm_runtime"]._name))
    sidecar = os.path.join(runtime_dir, "libtvm_runtime_cuda.so")
    if not os.path.isfile(sidecar):
        return tvm, f"{sidecar} is missing"
    cudart = find_cudart()
    try:
        if cudart:  # loaded first, so that the sidecar's NEEDED entry finds it by name
            ctypes.CDLL(cudart, mode=ctypes.RTLD_GLOBAL)
        _LOADED_LIBS["tvm_runtime_cuda"] = ctypes.CDLL(sidecar, mode=ctypes.RTLD_GLOBAL)
    except OSError as err:
        return tvm, f"cannot load TVM's CUDA runtime: {err}"
    return tvm, None


def runtime_only(tvm) -> bool:
    """Whether this ``tvm`` runs without its compiler library."""
    from tvm.base import _LOADED_LIBS

    return "tvm_compiler" not in _LOADED_LIBS
