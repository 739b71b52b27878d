"""Shape arithmetic over symbolic dimensions, folded to polynomials of them before the import.

With a shape range a dimension (``sequence``) stays symbolic, and the shape arithmetic the
exporters write (``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``, ``Where(Equal(shape,
-1), 1, shape) -> Expand``, ``Shape -> Gather -> Range``) has no constant value. TVM's
converters follow some of it as ``ShapeExpr`` values and fail on the rest (an ``Expand`` to
``[1, -1]``, a ``Gather`` on a shape tensor computed at run time).

:func:`fold_symbolic_shape_arithmetic` runs the static folding of :mod:`.shape_folding` once
per *probe*, a choice of sizes for the symbolic dimensions within their ranges. A value that
has the same shape at every probe and whose every element is a polynomial of degree at most 2
in the dimensions with integer coefficients (fitted on some probes, checked on two more) is
computed by one node of its own (:data:`SYMBOLIC_VALUE_OP`, no inputs) whose converter gives
TVM's importer the value as a ``ShapeExpr`` (a vector) or a ``PrimValue`` (a scalar) over the
dimensions' variables; a value equal at every probe becomes an initializer. The nodes that
computed them are removed. Values that are data (a position-id vector as long as the
sequence, a causal mask) have another shape at each probe and stay computed, from the folded
values they read.

Alternative rejected: teaching the converters each exporter's pattern of symbolic shape
arithmetic (TVM's handle some as ``ShapeExpr``); every exporter version writes new ones, and
the static folding already evaluates all of them.
"""

from __future__ import annotations

import itertools
import json
import logging
import math

import numpy as np

from ...errors import ModelError, error_message
from ..shape_ranges import dim_parts, dim_size
from . import shape_folding
from .registry import fix

logger = logging.getLogger(__name__)

#: the op type (domain :data:`DOMAIN`) of a node that gives a folded symbolic value
SYMBOLIC_VALUE_OP = "TvmHeteroSymbolicValue"
DOMAIN = "tvm_hetero"

#: preferred probe sizes: small (every shape value folds), distinct primes (a value that is not
#: a polynomial of the sizes is unlikely to fit one), away from 1 (broadcasting's special size)
_PROBE_SIZES = (7, 5, 11, 13, 3, 17, 19, 23, 2, 29, 31, 37, 41, 43, 47, 1)
#: probes beyond those that fix the polynomial: the fit must hold on them too
_CHECK_PROBES = 2
#: the sizes probed for a dimension given without a range
DEFAULT_RANGE = (1, 4096)
#: values with more elements than this are not fitted (shape tensors have a handful)
_MAX_ELEMENTS = 64
#: (op type, input position) of the inputs TVM's converters take a shape or a scalar at
#: (None: every input); other readers of a folded value get it as a tensor
SHAPE_INPUTS = frozenset({("Reshape", 1), ("Expand", 1), ("Range", None),
                          ("ConstantOfShape", 0), ("Tile", 1), ("Slice", 1), ("Slice", 2),
                          ("Slice", 3), ("Slice", 4), (SYMBOLIC_VALUE_OP, None)})


def _candidates(low: int, high: int) -> list[int]:
    sizes = [s for s in _PROBE_SIZES if low <= s <= high]
    extra = [s for s in range(low, min(high, low + 64) + 1) if s not in sizes]
    return sizes + extra


def _monomials(dims: list[str], candidates: dict[str, list[int]]) -> list[tuple[int, ...]]:
    """Exponent tuples of the monomials of degree <= 2 that the probes can tell apart (a
    dimension with two sizes in range gets no square: over its range a line is exact)."""
    top = [min(2, len(candidates[d]) - 1) for d in dims]
    out = []
    for powers in itertools.product(*(range(t + 1) for t in top)):
        if sum(powers) <= 2:
            out.append(powers)
    return out


def _design(points: list[tuple[int, ...]], monomials) -> np.ndarray:
    return np.array([[math.prod(v ** p for v, p in zip(point, powers)) for powers in monomials]
                     for point in points], dtype=np.float64)


def probe_points(dims: list[str], ranges: dict) -> tuple[list[tuple[int, ...]], list]:
    """Sizes of `dims` to fold the model at, and the monomials they determine.

    Parameters
    ----------
    dims : list of str
        The symbolic dimensions.
    ranges : dict
        ``{dim: (min, max)}``.

    Returns
    -------
    points : list of tuple of int
        Probes (one size per dimension): enough for the monomials' fit, and
        :data:`_CHECK_PROBES` more where the ranges have them.
    monomials : list of tuple of int
        Exponents per dimension of each monomial fitted.
    """
    candidates = {d: _candidates(*ranges[d]) for d in dims}
    monomials = _monomials(dims, candidates)
    rng = np.random.default_rng(0)
    points: list[tuple[int, ...]] = []
    # the first point is every dimension's first candidate; then more until the design has
    # full rank; then the checks
    space = math.prod(len(c) for c in candidates.values())
    tries = 0
    while tries < 200 and len(points) < min(space, len(monomials) + _CHECK_PROBES):
        tries += 1
        if not points:
            point = tuple(candidates[d][0] for d in dims)
        else:
            point = tuple(candidates[d][int(rng.integers(0, min(len(candidates[d]), 8 + tries)))]
                          for d in dims)
        if point in points:
            continue
        trial = points + [point]
        rank = np.linalg.matrix_rank(_design(trial, monomials))
        if rank == len(trial) or rank == len(monomials):
            points = trial
    if np.linalg.matrix_rank(_design(points, monomials)) < len(monomials):
        raise ModelError("cannot choose sizes of the dimensions " + ", ".join(dims)
                         + " to evaluate the model's shape arithmetic at")
    return points, monomials


def _fit(values: list[np.ndarray], design: np.ndarray, fitted: int):
    """Integer coefficients (monomials x elements) of the polynomials through `values`, fitted
    on the first `fitted` probes and exact on all; None if there are none."""
    flat = np.stack([v.reshape(-1).astype(np.float64) for v in values])
    coeffs, *_ = np.linalg.lstsq(design[:fitted], flat[:fitted], rcond=None)
    rounded = np.rint(coeffs)
    if np.abs(coeffs - rounded).max(initial=0) > 1e-6:
        return None
    exact = design.astype(np.int64) @ rounded.astype(np.int64)
    if not np.array_equal(exact, np.stack([v.reshape(-1) for v in values]).astype(np.int64)):
        return None
    return rounded.astype(np.int64)


def fold_symbolic_shape_arithmetic(model, shape_dict: dict[str, list], ranges: dict) -> int:
    """Fold the shape arithmetic of ``model`` over its symbolic dimensions (module docstring).

    Parameters
    ----------
    model : onnx.ModelProto
        The model, its input shapes pinned with the dimensions' names
        (:func:`.shape_folding.pin_input_shapes`); changed in place.
    shape_dict : dict of str to list
        Each graph input's shape: sizes and dimension names.
    ranges : dict
        ``{dim: (min, max)}`` of the dimensions in `shape_dict`; one not given:
        :data:`DEFAULT_RANGE`.

    Returns
    -------
    int
        The number of nodes removed.
    """
    import onnx
    from onnx import helper, numpy_helper

    dims = sorted({dim_parts(d)[0] for shape in shape_dict.values() for d in shape
                   if isinstance(d, str)})
    if not dims:
        return 0
    points, monomials = probe_points(dims, {d: ranges.get(d, DEFAULT_RANGE) for d in dims})
    fitted = len(monomials)
    probes = []
    for point in points:
        sizes = dict(zip(dims, point))
        probe = onnx.ModelProto()
        probe.CopyFrom(model)
        shape_folding.pin_input_shapes(
            probe, {n: [dim_size(d, sizes) if isinstance(d, str) else d for d in shape]
                    for n, shape in shape_dict.items()})
        values: dict = {}
        try:
            shape_folding.fold_shape_arithmetic(probe, values)
        except ModelError as err:
            logger.debug("no symbolic folding: at %s the model fails: %s", sizes,
                         error_message(err))
            return 0
        probes.append(values)
    design = _design(points, monomials)
    resolved: dict[str, object] = {}  # name -> constant array, or (coefficients, shape)
    for name in set.intersection(*(set(p) for p in probes)):
        values = [p[name] for p in probes]
        first = values[0]
        if any(v.shape != first.shape or v.dtype != first.dtype for v in values):
            continue
        if all(np.array_equal(v, first) for v in values[1:]):
            resolved[name] = first
        elif first.dtype == np.int64 and first.ndim <= 1 and first.size <= _MAX_ELEMENTS:
            coeffs = _fit(values, design, fitted)
            if coeffs is not None:
                resolved[name] = (coeffs, first.shape)
    graph = model.graph
    outputs = {value.name for value in graph.output}
    initializers = {init.name for init in graph.initializer}
    kept, removed = [], 0
    for node in graph.node:
        names = [name for name in node.output if name]
        if names and node.domain in ("", "ai.onnx") and not outputs.intersection(names) \
                and all(name in resolved for name in names):
            removed += 1
            continue
        kept.append(node)
    if not removed:
        return 0
    produced = {name for node in kept for name in node.output}
    needed = set(outputs)
    readers: dict[str, list[tuple]] = {}  # name -> (node, input position) of kept nodes
    for node in kept:
        needed.update(node.input)
        needed.update(shape_folding._outer_names(node))
        for position, name in enumerate(node.input):
            readers.setdefault(name, []).append((node, position))
    new_nodes = []
    for name in sorted(needed - produced - initializers - {v.name for v in graph.input}):
        if name not in resolved:
            continue
        value = resolved[name]
        if isinstance(value, np.ndarray):
            graph.initializer.append(numpy_helper.from_array(value, name))
            continue
        coeffs, shape = value
        polynomial = {"dims": dims, "shape": list(shape),
                      "monomials": [list(p) for p in monomials],
                      "coefficients": coeffs.T.tolist()}  # per element, per monomial
        as_shape = [(node, i) for node, i in readers.get(name, [])
                    if (node.op_type, i) in SHAPE_INPUTS or
                    (node.op_type, None) in SHAPE_INPUTS]
        as_data = len(as_shape) < len(readers.get(name, []))
        # a shape input takes the value as TVM's importer gives shapes (ShapeExpr, PrimValue);
        # data (a position id) as a tensor
        for form, output in (("shape", name if not as_data else f"{name}__shape"),
                             ("tensor", name)):
            if form == "shape" and not as_shape or form == "tensor" and not as_data:
                continue
            if form == "shape" and as_data:
                for node, i in as_shape:
                    node.input[i] = output
            new_nodes.append(helper.make_node(SYMBOLIC_VALUE_OP, [], [output], domain=DOMAIN,
                                              name=f"symbolic_{output}", form=form,
                                              polynomial=json.dumps(polynomial)))
            graph.value_info.append(helper.make_tensor_value_info(
                output, onnx.TensorProto.INT64, list(shape)))
    graph.ClearField("node")
    graph.node.extend(new_nodes + kept)
    if not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    logger.debug("symbolic folding: %d nodes removed, %d symbolic values", removed,
                 len(new_nodes))
    return removed


@fix(SYMBOLIC_VALUE_OP)
def _symbolic_value(importer, inputs, attrs, opset):
    """A folded symbolic value: a ``ShapeExpr`` (a vector) or a ``PrimValue`` (a scalar)."""
    from tvm import relax, tirx

    polynomial = attrs["polynomial"]
    if isinstance(polynomial, bytes):
        polynomial = polynomial.decode()
    polynomial = json.loads(polynomial)
    variables = importer.dimension_vars  # the variables import_onnx gave the inputs
    missing = [d for d in polynomial["dims"] if d not in variables]
    if missing:
        raise ModelError(f"symbolic dimension(s) {', '.join(missing)} of a folded shape value "
                         "are on no model input")
    terms = [math.prod((variables[d] for d, p in zip(polynomial["dims"], powers)
                        for _ in range(p)), start=tirx.IntImm("int64", 1))
             for powers in polynomial["monomials"]]
    elements = []
    for coefficients in polynomial["coefficients"]:
        expr = tirx.IntImm("int64", 0)
        for c, term in zip(coefficients, terms):
            if c:
                expr = expr + tirx.IntImm("int64", int(c)) * term
        elements.append(_simplified(expr))
    form = attrs.get("form", b"shape")
    form = form.decode() if isinstance(form, bytes) else form
    if form == "tensor":  # data: an int64 tensor of the value's shape
        values = importer.bb.normalize(relax.op.shape_to_tensor(relax.ShapeExpr(elements)))
        return relax.op.reshape(values, relax.ShapeExpr(list(polynomial["shape"])))
    if not polynomial["shape"]:
        return relax.prim_value(elements[0])
    return relax.ShapeExpr(elements)


def _simplified(expr):
    from tvm.sym import Analyzer

    return Analyzer().simplify(expr)


def _scalar(expr):
    """An integer scalar input as a PrimExpr (a constant's value or a PrimValue's), else None."""
    import tvm

    if isinstance(expr, tvm.ir.GenericConst):
        value = expr.value.numpy()
        if value.size == 1 and value.dtype.kind in "iu":
            return int(value.reshape(-1)[0])
        return None
    if tvm.ir.is_prim_expr(expr):
        return expr
    return None


@fix("Range")
def _range(importer, inputs, attrs, opset):
    """Range over an integer limit that is a symbolic dimension's polynomial (position ids
    over a shape range's sequence): ``arange`` with a symbolic length. TVM's converter
    computes the length in a tensor, whose size the VM cannot allocate by."""
    import tvm
    from tvm import relax

    if not any(tvm.ir.is_prim_expr(x) for x in inputs):
        return None
    scalars = [_scalar(x) for x in inputs]
    if any(s is None for s in scalars):
        return None
    dtype = next((str(x.ty.dtype) for x in inputs if not tvm.ir.is_prim_expr(x)
                  and hasattr(x.ty, "dtype")), "int64")
    start, limit, delta = scalars
    return relax.op.arange(start, limit, delta, dtype=dtype)
