"""Sessions and timing for the suite's benchmarks: onnxruntime CPU sessions, a suite model
ready to compare (:func:`suite_case`), the A/B benchmarks' options, device set and alternating
rounds (:func:`alternating_best`), and facts about the host (CPU name, copy bandwidth) and a
model (weight bytes) that the reports print."""

from __future__ import annotations

import json
import math
import time

import onnx

from .architectures import SUITE


def ort_cpu_session(proto: onnx.ModelProto, threads: int, profile_prefix: str | None = None):
    """An onnxruntime CPU session of `proto` on `threads` intra-op threads, one inter-op
    thread, warnings off; profiling into files starting with `profile_prefix` where given."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.log_severity_level = 3
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    return ort.InferenceSession(proto.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def suite_case(name: str, threads: int):
    """Suite model `name` ready to compare: ``(proto, feed, model, inputs, session, want)``:
    the ONNX model and onnxruntime's feed, the tvm_hetero model and its inputs, an
    onnxruntime CPU session on `threads` threads and its outputs (the reference)."""
    import tvm_hetero as th

    proto, feed = SUITE[name]()
    model = th.load_model(proto, name=name)
    inputs = {spec.name: feed[spec.source_name or spec.name] for spec in model.inputs}
    session = ort_cpu_session(proto, threads)
    return proto, feed, model, inputs, session, session.run(None, feed)


def add_ab_args(parser, models: str) -> None:
    """The A/B benchmarks' common options on an ``argparse`` parser.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        Gets ``--models`` (comma-separated suite names, default `models`), ``--target-mcpu``
        (see :func:`cpu_devices`), ``--rounds`` and ``--repeat`` (both default 5, for
        :func:`alternating_best`).
    models : str
        The default of ``--models``.
    """
    parser.add_argument("--models", default=models)
    parser.add_argument("--target-mcpu")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5)


def cpu_devices(target_mcpu: str | None, threads: int):
    """The A/B benchmarks' one-device set: the host CPU (``cpu``), or with `target_mcpu` an
    LLVM CPU of that name and `threads` cores, also named ``cpu``."""
    import tvm_hetero as th

    spec = "cpu"
    if target_mcpu:
        spec = json.dumps({"kind": "llvm", "mcpu": target_mcpu, "num-cores": threads,
                           "name": "cpu"})
    return th.DeviceSet.parse([spec])


def alternating_best(session, feed, builds: dict, inputs, rounds: int, repeat: int) -> dict:
    """Best median ms over `rounds` rounds alternating onnxruntime's `session` (key ``ort``,
    fed `feed`) and each compiled model of `builds` (by its key, fed `inputs`)."""
    import tvm_hetero as th

    keys = ["ort", *builds]
    best = dict.fromkeys(keys, math.inf)
    for index in range(rounds):
        # each round starts with the next one: on a tiny model the first of a round read up
        # to 5-10 % faster than the others (MobileNetV3's block, A/B and B/A)
        for key in keys[index % len(keys):] + keys[:index % len(keys)]:
            time.sleep(0.3)
            if key == "ort":
                ms = th.time_function(lambda: session.run(None, feed), repeat=repeat).median
            else:
                ms = builds[key].benchmark(inputs, repeat=repeat).median
            best[key] = min(best[key], ms)
    return best




def weight_bytes(proto: onnx.ModelProto) -> int:
    """Bytes of the model's initializers (its weights and constants)."""
    from onnx import helper

    total = 0
    for init in proto.graph.initializer:
        count = math.prod(init.dims)
        total += count * helper.tensor_dtype_to_np_dtype(init.data_type).itemsize
    return total


def copy_bandwidth_gbs(device, tries: int = 3) -> float:
    """The copy bandwidth ``tvm-hetero devices`` reports for one device (a device-to-itself
    copy fitted over 4 KiB..16 MiB, ``profiles.measure_transfer``): the best of `tries`."""
    from tvm_hetero.measure.profiles import measure_transfer

    return max(measure_transfer(device, device).bandwidth_gbs for _ in range(tries))
