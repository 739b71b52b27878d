"""An independent reference for a model's outputs, and builds verified against it.

What a build is checked against must not share the code under test, or a rule that computes
the wrong answer agrees with itself. The reference is therefore

- **onnxruntime** (its CPU provider) running the *original* ONNX model (not the one the
  frontend's fixes produced), fed the same inputs by their ONNX names, its outputs taken in the
  graph's order: where the model is ONNX and onnxruntime is installed;
- else the model built **without the optimization rules** (``build(..., optimize=False)``:
  TVM's default loops) with every layer on the first device: a Relax module, a torch program,
  no onnxruntime, or a model onnxruntime refuses (logged, with why).

Outputs match where each is within its dtype's tolerance of the reference (see
:func:`tolerance_for`: 1e-4 of the largest reference magnitude for
float32, exact for integers). :func:`verify_build` checks a built library (``compile
--verify``); when it disagrees, :func:`~tvm_hetero.optimize.bisect.locate_rules` rebuilds with
the rules of some kernels switched off (``build(..., unscheduled=...)``) to name the kernels
whose rules are at fault, and the result is a :class:`~tvm_hetero.errors.VerificationError`
naming them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import BuildError, VerificationError, error_message

logger = logging.getLogger(__name__)

ONNXRUNTIME = "onnxruntime"
DEFAULT_LOOPS = "default-loops"
GIVEN = "given"

# Relative tolerance (to the largest reference magnitude) per output dtype
TOLERANCE = {"float64": 1e-8, "float32": 1e-4, "float16": 1e-2, "bfloat16": 2e-2}


def tolerance_for(dtype: str) -> float:
    """Allowed relative error for outputs of `dtype`: 0 (exact) for integers and bools."""
    return TOLERANCE.get(str(dtype), 0.0)


def relative_errors(got: list[np.ndarray], want: list[np.ndarray]) -> list[float]:
    """Per output: max |got - want| / max |want| (inf on a shape or dtype mismatch)."""
    errors = []
    for a, b in zip(got, want):
        if a.shape != b.shape or a.dtype != b.dtype:
            errors.append(float("inf"))
            continue
        if a.size == 0:
            errors.append(0.0)
            continue
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        if not np.all(np.isfinite(diff)):
            errors.append(float("inf"))
            continue
        errors.append(float(diff.max() / (np.abs(b).max() + 1e-30)))
    if len(got) != len(want):
        errors.append(float("inf"))
    return errors


def outputs_match(got: list[np.ndarray], want: list[np.ndarray]) -> tuple[bool, float]:
    """Whether outputs match the reference within the per-dtype tolerance; the worst error."""
    errors = relative_errors(got, want)
    ok = all(err <= tolerance_for(b.dtype) for err, b in zip(errors, want)) and \
        len(got) == len(want)
    return ok, max(errors) if errors else 0.0


@dataclass
class Reference:
    """Reference outputs and where they come from.

    Attributes
    ----------
    outputs : list of numpy.ndarray
        In the model's output order.
    kind : str
        ``"onnxruntime"``, ``"default-loops"`` (the no-rules build) or ``"given"``.
    label : str
        What messages call it: ``onnxruntime`` or ``TVM's default loops on cpu``.
    detail : str
        onnxruntime's version, or why onnxruntime was not the reference.
    """

    outputs: list[np.ndarray]
    kind: str
    label: str
    detail: str = ""

    def describe(self) -> str:
        """The label with its detail, for logs and the records header."""
        return f"{self.label} ({self.detail})" if self.detail else self.label


def reference_outputs(model: Any, devices, inputs: dict[str, np.ndarray],
                      layers: list | None = None) -> Reference:
    """The independent reference outputs of `model` for `inputs` (by Relax or source name).

    Parameters
    ----------
    model : Model or anything :func:`~tvm_hetero.load_model` accepts
    devices : DeviceSet
        The first device runs the no-rules build, when that is the reference.
    inputs : dict of str to numpy.ndarray
    layers : list of Layer, optional
        The model's layers for `devices` (extracted when not given).
    """
    from ..build.compile import build
    from ..frontend.load import load_model
    from ..layers.extract import extract_layers
    from ..placement import Placement
    from ..prepare import PrepareConfig

    model = load_model(model)
    if model.onnx_model is None:
        why = "not an ONNX model"
    else:
        outputs, why = _onnxruntime_outputs(model, inputs)
        if outputs is not None:
            return Reference(outputs, ONNXRUNTIME, "onnxruntime", why)
    first = devices[0].name
    label = f"TVM's default loops on {first}"
    if model.onnx_model is not None:
        log = logger.info if why == _NO_ONNXRUNTIME else logger.warning
        log("reference outputs: %s instead of onnxruntime: %s", label, why)
    layers = layers if layers is not None else extract_layers(
        model, PrepareConfig.for_devices(devices))
    try:
        outputs = build(model, Placement.all_on(layers, first), devices,
                        optimize=False).run(inputs)
    except BuildError as err:
        raise BuildError(f"the reference build ({label}) failed: {error_message(err)}") from err
    return Reference(outputs, DEFAULT_LOOPS, label, why)


_NO_ONNXRUNTIME = "onnxruntime is not installed"


def reference_session(onnx_model):
    """An onnxruntime CPU session of `onnx_model` for reference outputs: warnings off, and the
    graph as written (its graph optimizations off: onnxruntime 1.32's fusions answered a
    Transpose then a MatMul by a vector wrong, generated graph 20222)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(onnx_model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def _onnxruntime_outputs(model, inputs: dict[str, np.ndarray]):
    """(onnxruntime's outputs of the original ONNX model, its version) or (None, why not)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None, _NO_ONNXRUNTIME
    feeds = {}
    for spec in model.inputs:
        value = inputs.get(spec.name, inputs.get(spec.source_name or spec.name))
        if value is None:
            return None, f"no value for input {spec.name!r}"
        feeds[spec.source_name or spec.name] = np.asarray(value)
    try:
        session = reference_session(model.onnx_model)
        names = [arg.name for arg in session.get_inputs()]
        outputs = session.run(None, {name: feeds[name] for name in names if name in feeds})
    except Exception as err:  # noqa: BLE001 (onnxruntime raises many kinds: all mean "refused")
        return None, f"onnxruntime refused the model: {error_message(err, max_chars=300)}"
    outputs = [np.asarray(out) for out in outputs]
    expected = _output_signature(model)
    if expected is not None:
        if len(expected) != len(outputs):
            return None, (f"onnxruntime gives {len(outputs)} outputs where the imported model "
                          f"has {len(expected)}")
        for index, (out, (shape, dtype)) in enumerate(zip(outputs, expected)):
            same_shape = len(shape) == out.ndim and all(
                d is None or d == n for d, n in zip(shape, out.shape))
            if not same_shape or str(out.dtype) != dtype:
                return None, (f"onnxruntime gives output {index} as {out.dtype} "
                              f"{list(out.shape)} where the imported model has {dtype} "
                              f"{[d if d is not None else '?' for d in shape]}")
    return outputs, f"onnxruntime {ort.__version__}"


def _output_signature(model) -> list[tuple[list, str]] | None:
    """(shape with None for unknown dimensions, dtype) of each output of the Relax ``main``, in
    the order a build returns them; None when they cannot be read."""
    from tvm import relax, tirx

    def flatten(ty):
        if isinstance(ty, relax.TupleType):
            return [item for field in ty.fields for item in flatten(field)]
        if isinstance(ty, relax.TensorType) and ty.shape is not None:
            shape = [int(d) if isinstance(d, tirx.IntImm) else None for d in ty.shape.values]
            return [(shape, str(ty.dtype))]
        raise ValueError

    try:
        return flatten(model.mod["main"].ret_ty)
    except Exception:  # noqa: BLE001 (an output type this does not read: not compared)
        return None


# -- comparing ---------------------------------------------------------------------------------

def _format_tolerance(tolerance: float) -> str:
    if tolerance == 0:
        return "exact"
    mantissa, exponent = f"{tolerance:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _format_error(error: float) -> str:
    percent = error * 100
    return f"{percent:.0f}%" if percent >= 1 else f"{percent:.2g}%"


def describe_mismatch(outputs: Sequence[np.ndarray], reference: Reference) -> str | None:
    """None when `outputs` match the reference within tolerance, else one line on the first
    output that does not: ``output 0 differs from onnxruntime by 59% (tolerance 1e-4)``."""

    want = reference.outputs
    if len(outputs) != len(want):
        return f"the model gives {len(outputs)} outputs, {reference.label} {len(want)}"
    errors = relative_errors(list(outputs), list(want))
    for index, (got, expected, error) in enumerate(zip(outputs, want, errors)):
        tolerance = tolerance_for(expected.dtype)
        if error <= tolerance:
            continue
        where = f"output {index}"
        if got.shape != expected.shape or got.dtype != expected.dtype:
            return (f"{where} is {got.dtype} {list(got.shape)} where {reference.label} gives "
                    f"{expected.dtype} {list(expected.shape)}")
        if not np.isfinite(error):
            return f"{where} differs from {reference.label} in NaN or infinite values"
        return (f"{where} differs from {reference.label} by {_format_error(error)} "
                f"(tolerance {_format_tolerance(tolerance)})")
    return None


# -- verifying a build -------------------------------------------------------------------------

@dataclass
class Verification:
    """A build that matched the reference: which reference, the largest relative error."""

    reference: Reference
    max_error: float

    def to_json(self) -> dict[str, Any]:
        return {"reference": self.reference.describe(), "max_error": self.max_error}


def verify_build(model, placement, devices, compiled, rules: dict[str, str | None], *,
                 tuning=None, seed: int = 0,
                 reference: Reference | None = None, rule_table=None) -> Verification:
    """Run `compiled` (a build of `model` under `placement`) on seeded random inputs and check
    its outputs against the independent reference.

    Parameters
    ----------
    model : Model
    placement : Placement
    devices : DeviceSet
    compiled : CompiledModel
        The library to check (e.g. loaded back from the file written).
    rules : dict of str to str or None
        ``{kernel: rule}`` of the build (``CompiledModel.stats.rules``).
    tuning : KernelTuningDatabase, optional
        The tuning database the build used (rebuilds use it too).
    seed : int
        Seed of the random inputs (default 0).
    reference : Reference, optional
        Computed when not given. For a model with shape ranges, the reference at their tuning
        point; the outputs are also checked at the ranges' minimum and maximum.
    rule_table : RuleTable, optional
        The optimization table the build used (``build(..., rules=...)``; rebuilds use it
        too). None: the default table.

    Returns
    -------
    Verification

    Raises
    ------
    VerificationError
        The outputs disagree; the message names the kernels and rules found at fault.
    """

    from ..frontend.shape_ranges import check_points

    given = reference
    # a dynamic model: at the tuning point, then at the ends of its ranges
    points = [None]
    if model.is_dynamic:
        opt = model.dims_at("opt")
        points = [opt] + [p for p in check_points(model.shape_ranges) if p != opt]
    worst, first = 0.0, None
    for dims in points:
        inputs = model.random_inputs(seed, dims)
        reference = given if given is not None and first is None else \
            reference_outputs(model, devices, inputs)
        first = first or reference
        outputs = compiled.run(inputs)
        ok, max_error = outputs_match(outputs, reference.outputs)
        worst = max(worst, max_error)
        if not ok:
            break
    if ok:
        logger.info("verified against %s: largest relative error %.3g%s", first.describe(),
                    worst, f" at {len(points)} shapes" if len(points) > 1 else "")
        return Verification(first, worst)
    mismatch = describe_mismatch(outputs, reference) or \
        f"outputs differ from {reference.label} (relative error {max_error:.3g})"
    from ..optimize.bisect import locate_rules

    def agrees(got: list[np.ndarray]) -> bool:
        return outputs_match(got, reference.outputs)[0]

    raise VerificationError(f"verification failed: {mismatch}; " + locate_rules(
        model, placement, devices, inputs, agrees, rules, tuning=tuning,
        rule_table=rule_table))


__all__ = ["DEFAULT_LOOPS", "GIVEN", "ONNXRUNTIME", "Reference", "Verification",
           "describe_mismatch", "outputs_match", "reference_outputs", "reference_session",
           "relative_errors", "tolerance_for", "verify_build"]
