"""The anchor of the GPU figures: the same ONNX models in PyTorch on the same GPU.

Each bundled ONNX model (the weights the TVM libraries were built from) is converted to a
``torch.fx`` module by ``onnx2torch`` (pure Python, carried in the bundle's wheels) and run in
fp32 with TF32 off (cuBLAS and cuDNN), eagerly and as a captured CUDA graph. Its outputs are
checked against the same onnxruntime reference as TVM's. A model that does not convert or run
gets a note in the table instead of times: the check goes on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable


def time_ms(func: Callable[[], object], sync: Callable[[], None], repeat: int,
            min_repeat_ms: float) -> float:
    """Median ms of one call over `repeat` measurements of at least `min_repeat_ms` each."""
    # tvm_hetero.build.runtime.time_function's loop: tvm_hetero does not import where TVM's compiler
    # is absent (the GPU machine), so the anchor keeps its own
    for _ in range(2):
        func()
    sync()
    number = 1
    while True:
        start = time.perf_counter()
        for _ in range(number):
            func()
        sync()
        elapsed = (time.perf_counter() - start) * 1e3
        if elapsed >= min_repeat_ms or number >= 1 << 16:
            break
        number = max(number * 2, int(number * min_repeat_ms / max(elapsed, 1e-3) * 1.1))
    results = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            func()
        sync()
        results.append((time.perf_counter() - start) * 1e3 / number)
    results.sort()
    return results[len(results) // 2]


@dataclass
class AnchorResult:
    """Per anchor label (``torch eager``, ``torch graph``): a timer and the output's error."""

    entries: dict = field(default_factory=dict)
    note: str | None = None


class TorchAnchor:
    """PyTorch on GPU 0, fp32 with TF32 off."""

    def __init__(self, repeat: int = 5, min_repeat_ms: float = 40.0):
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        torch.backends.cudnn.benchmark = True
        self.torch = torch
        self.device = torch.device("cuda", 0)
        self.repeat = repeat
        self.min_repeat_ms = min_repeat_ms

    def describe(self) -> str:
        torch = self.torch
        return (f"anchor: PyTorch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN "
                f"{torch.backends.cudnn.version()}) on {torch.cuda.get_device_name(0)}, fp32, "
                f"TF32 off, eager and CUDA graph")

    def prepare(self, onnx_path: str, inputs: dict, reference: list) -> AnchorResult:
        """Convert and check one model; timers for its eager and CUDA-graph runs."""
        from .runner import max_relative_error

        torch = self.torch
        result = AnchorResult()
        try:
            import onnx
            from onnx2torch import convert

            module = convert(onnx.load(onnx_path)).to(self.device).eval()
        except Exception as err:  # a model PyTorch cannot take is a note, not the end
            result.note = f"not converted by onnx2torch: {type(err).__name__}: {err}"[:300]
            return result
        args = [torch.from_numpy(array).to(self.device) for array in inputs.values()]
        sync = torch.cuda.synchronize

        def eager():
            with torch.inference_mode():
                return module(*args)

        try:
            err = max_relative_error(self._numpy(eager()), reference)
            result.entries["torch eager"] = (
                lambda: time_ms(eager, sync, self.repeat, self.min_repeat_ms), err)
        except Exception as err:
            result.note = f"eager run failed: {type(err).__name__}: {err}"[:300]
            return result
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(3):
                    eager()
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.inference_mode(), torch.cuda.graph(graph):
                static_out = module(*args)
            graph.replay()
            sync()
            err = max_relative_error(self._numpy(static_out), reference)
            result.entries["torch graph"] = (
                lambda: time_ms(graph.replay, sync, self.repeat, self.min_repeat_ms), err)
        except Exception as err:
            result.note = f"CUDA graph capture failed: {type(err).__name__}: {err}"[:300]
        return result

    def _numpy(self, out) -> list:
        torch = self.torch
        if isinstance(out, torch.Tensor):
            return [out.detach().float().cpu().numpy()]
        return [arr for item in out for arr in self._numpy(item)]
