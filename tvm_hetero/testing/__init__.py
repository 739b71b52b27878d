"""Helpers for tests, benchmarks and tutorials (nothing in tvm_hetero itself imports them).

- :mod:`~tvm_hetero.testing.models`: the onnx package's real model graphs and backend-test
  cases, onnxruntime references, random placements, the runner's error measure;
- :mod:`~tvm_hetero.testing.fakes`: a builder and a runner that measure nothing, for tests of
  search logic;
- :mod:`~tvm_hetero.testing.graph_gen`: seeded random valid ONNX graphs (opset 17) and their
  inputs, for differential testing;
- :mod:`~tvm_hetero.testing.fuzz`: those graphs through ours, plain TVM and onnxruntime in
  worker processes with timeouts, outcomes classified, failing graphs reduced
  (``benchmarks/graph_fuzz.py``; imported on its own: ``from tvm_hetero.testing.fuzz import
  Fuzzer``);
- :mod:`~tvm_hetero.testing.faults`: a builder and a runner that inject real failures (crashes,
  hangs, exceptions, wrong outputs) into chosen candidates, through their build and run
  functions (imported on its own: ``from tvm_hetero.testing.faults import FaultPlan``);
- :mod:`~tvm_hetero.testing.suite`: the architecture suite's models built by code (``SUITE``)
  and the helpers its benchmarks share: onnxruntime sessions, alternating timing rounds
  (``benchmarks/model_suite.py`` and the A/B scripts; imported on its own: ``from
  tvm_hetero.testing.suite import SUITE``);
- :mod:`~tvm_hetero.testing.onnx_cases`: the onnx package's backend-test cases through ours and
  through plain TVM in worker processes, with verdicts (``benchmarks/onnx_model_cases.py``,
  ``benchmarks/onnx_node_suite.py``; imported on its own);
- :mod:`~tvm_hetero.testing.scheduled`: a pass keeping a build's scheduled kernels, their
  estimated FLOPs, depthwise convolutions (the GPU census, the schedule hashes, tests).
- :mod:`~tvm_hetero.testing.recommendation`: a DLRM-like model (large embedding tables, dense
  layers) with seeded inputs, for a CPU + GPU placement under a GPU memory cap
  (``tutorials/cpu_and_gpu.py``, ``benchmarks/gpu_check.py``; imported on its own).
"""

from .fakes import FakeBuilder, FakeRunner
from .graph_gen import random_graph, random_inputs
from .models import (LIGHT_MODELS, light_model, light_model_path, max_relative_error,
                     onnx_case, onnx_case_dir, onnx_node_case, onnx_reference,
                     random_placement, run_onnx_node_case)

__all__ = ["FakeBuilder", "FakeRunner", "LIGHT_MODELS", "light_model", "light_model_path",
           "max_relative_error", "onnx_case", "onnx_case_dir", "onnx_node_case", "onnx_reference",
           "random_graph", "random_inputs", "random_placement", "run_onnx_node_case"]
