"""The interface the command line calls: one function per ``tvm-hetero`` command, doing what
the command does (loading, checking, tuning, building, writing files) and returning what it
reports. The CLI (:mod:`tvm_hetero.cli`) parses arguments, calls these and prints; Python code
calls them with the same arguments as the flags::

    result = tvm_hetero.api.compile_model("zoo:resnet", ["cpu", "cpu-generic"], "resnet.so",
                                          records="records.jsonl")
    print(result.to_json())

Models are anything :func:`~tvm_hetero.load_model` accepts (with `input_shapes` for dynamic
inputs), devices a :class:`~tvm_hetero.DeviceSet` or device strings (with `memory` caps);
every user mistake raises a :class:`~tvm_hetero.HeteroError` with one line of text.

The commands live by what they do: ``inspection`` (inspect, devices, optimizations),
``placement_search`` (tune, report), ``library`` (compile, run); ``common`` is the argument
handling they share. Use them from here: ``tvm_hetero.api`` is the interface.
"""

from ..build.memory import format_bytes
from ..build.profile import STATISTICS as PROFILE_STATISTICS
from ..frontend.shape_ranges import is_dimension_text, parse_shape_range
from ..search import DEFAULT_THRESHOLD, STRATEGIES
from .common import device_set
from .inspection import (ModelLayers, device_status, inspect_model, optimization_rules,
                         optimization_table)
from .library import CompileResult, RunResult, compile_model, read_inputs, run_library
from .placement_search import report_records, tune_placement

__all__ = ["CompileResult", "DEFAULT_THRESHOLD", "ModelLayers", "PROFILE_STATISTICS",
           "RunResult", "STRATEGIES",
           "compile_model", "device_set", "device_status", "format_bytes", "inspect_model",
           "optimization_rules", "optimization_table", "read_inputs", "report_records",
           "run_library", "is_dimension_text", "parse_shape_range", "tune_placement"]
