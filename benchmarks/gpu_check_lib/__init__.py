"""The parts of ``benchmarks/gpu_check.py``: the bundle built here (``bundle``, needs TVM's
compiler) and what runs it on the GPU machine with TVM's runtime alone (``runtime_env``,
``cuda_kernels``, ``runner``, ``anchor``: numpy, ``tvm.runtime``, and PyTorch for the anchor)."""
