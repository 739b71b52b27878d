"""Shape ranges: a model input's dynamic dimensions, each named, with the range of sizes one
library serves and the size it is tuned at (in the spirit of TensorRT's optimization
profiles: min, max, opt).

A range lives on the Relax module, so every stage that holds the module sees it: ``main``
carries ``{name: [min, max, opt]}`` under :data:`RANGES_ATTR` and the maximum under TVM's own
``tir_var_upper_bound`` (Relax's memory planning then sizes buffers for the maximum).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InputError, ModelError

#: ``main``'s attribute ``{dimension name: [min, max, opt]}``
RANGES_ATTR = "tvm_hetero.shape_ranges"

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# a dimension another one fixes: ``past+1`` (a decode step's attention mask covers the cached
# positions and the new one)
_DERIVED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*([+-])\s*([0-9]+)")


def dim_parts(dim: str) -> tuple[str, int]:
    """``"past+1"`` -> ``("past", 1)``, ``"seq"`` -> ``("seq", 0)``: the dimension a named
    dimension is, and its offset from it.

    Raises
    ------
    ModelError
        For text that is neither a name nor ``NAME+K`` / ``NAME-K``.
    """
    if _NAME.fullmatch(dim):
        return dim, 0
    match = _DERIVED.fullmatch(dim.strip())
    if match is None:
        raise ModelError(f"dimension {dim!r} is neither a name nor NAME+K (NAME-K)")
    name, sign, offset = match.groups()
    return name, int(offset) if sign == "+" else -int(offset)


def is_dimension_text(dim: str) -> bool:
    """Whether `dim` names a dynamic dimension: ``seq`` or ``past+1``."""
    try:
        dim_parts(dim)
    except ModelError:
        return False
    return True


def dim_size(dim: str, dims: dict[str, int]) -> int:
    """The size of named dimension `dim` (``seq``, ``past+1``) given the sizes `dims`."""
    name, offset = dim_parts(dim)
    return int(dims[name]) + offset


@dataclass(frozen=True)
class ShapeRange:
    """The sizes a dynamic dimension takes: ``min <= size <= max``; ``opt`` is the size the
    placement search and the rules' choices are tuned at."""

    min: int
    max: int
    opt: int

    def __post_init__(self):
        if not 1 <= self.min <= self.opt <= self.max:
            raise ModelError(f"a range needs 1 <= min <= opt <= max, got min {self.min}, "
                             f"max {self.max}, opt {self.opt}")

    def to_json(self) -> list[int]:
        return [self.min, self.max, self.opt]

    def __str__(self) -> str:
        return f"{self.min}:{self.max}:{self.opt}"


def parse_shape_range(text: str) -> tuple[str, ShapeRange]:
    """``"seq=1:512:128"`` -> ``("seq", ShapeRange(1, 512, 128))``; ``opt`` defaults to max.

    Raises
    ------
    ModelError
        For text that is not ``NAME=MIN:MAX[:OPT]`` of positive integers in order.
    """
    name, sep, spec = text.partition("=")
    name = name.strip()
    parts = spec.split(":")
    if not sep or not _NAME.fullmatch(name) or len(parts) not in (2, 3) \
            or not all(p.strip().isdigit() for p in parts):
        raise ModelError(f"bad shape range {text!r}: expected NAME=MIN:MAX[:OPT] "
                         "(e.g. seq=1:512:128)")
    low, high, *opt = (int(p) for p in parts)
    try:
        return name, ShapeRange(low, high, opt[0] if opt else high)
    except ModelError as err:
        raise ModelError(f"bad shape range {text!r}: {err}") from None


def as_ranges(given) -> dict[str, ShapeRange]:
    """``{name: ShapeRange}`` from a dict of ShapeRange, ``(min, max[, opt])`` tuples or
    ``"min:max[:opt]"`` strings (the API's ``shape_ranges=``)."""
    out = {}
    for name, value in (given or {}).items():
        if isinstance(value, ShapeRange):
            out[name] = value
        elif isinstance(value, str):
            out[name] = parse_shape_range(f"{name}={value}")[1]
        else:
            values = [int(v) for v in value]
            if len(values) not in (2, 3):
                raise ModelError(f"shape range {name}: give (min, max) or (min, max, opt), "
                                 f"got {value!r}")
            out[name] = ShapeRange(values[0], values[1], values[2] if len(values) == 3
                                   else values[1])
        if not _NAME.fullmatch(name):
            raise ModelError(f"shape range name {name!r} is not an identifier")
    return out


def module_ranges(mod) -> dict[str, ShapeRange]:
    """The shape ranges ``main`` of `mod` carries (empty for a static module)."""
    main = mod["main"]
    ranges = main.attrs.get(RANGES_ATTR) if main.attrs is not None else None
    return {str(name): ShapeRange(int(v[0]), int(v[1]), int(v[2]))
            for name, v in (ranges or {}).items()}


def with_ranges(mod, ranges: dict[str, ShapeRange]):
    """`mod` with ``main`` carrying `ranges` (and their maxima as ``tir_var_upper_bound``,
    beside the bounds already there)."""
    from ..relax_ir import UPPER_BOUND_ATTR, upper_bounds

    if not ranges:
        return mod
    main = mod["main"]
    bounds = upper_bounds(mod)
    bounds.update({name: r.max for name, r in ranges.items()})
    main = main.with_attr(RANGES_ATTR, {name: r.to_json() for name, r in ranges.items()})
    main = main.with_attr(UPPER_BOUND_ATTR, bounds)
    out = mod.clone()
    out["main"] = main
    return out


def used_ranges(ranges: dict[str, ShapeRange], used: set[str]) -> dict[str, ShapeRange]:
    """The ranges of the dimensions `used` by a model's inputs.

    Raises
    ------
    ModelError
        For a range given for a dimension no input has.
    """
    unused = sorted(set(ranges) - used)
    if unused:
        raise ModelError(f"shape range given for {', '.join(unused)}, which no input has; the "
                         f"dynamic dimensions are {', '.join(sorted(used)) or 'none'}")
    return {name: r for name, r in ranges.items() if name in used}


def point(ranges: dict[str, ShapeRange], where: str) -> dict[str, int]:
    """Each dimension's size at ``where``: ``"min"``, ``"opt"`` or ``"max"``."""
    if where not in ("min", "opt", "max"):
        raise ValueError(f"where must be min, opt or max, not {where!r}")
    return {name: getattr(r, where) for name, r in ranges.items()}


def check_points(ranges: dict[str, ShapeRange]) -> list[dict[str, int]]:
    """The distinct shape points a candidate is verified at: min, opt, max."""
    out = []
    for where in ("min", "opt", "max"):
        p = point(ranges, where)
        if p not in out:
            out.append(p)
    return out


def bind_dims(shapes: list[tuple[int, ...]], specs, ranges: dict[str, ShapeRange]
              ) -> dict[str, int]:
    """The size of each named dimension in the given input shapes, checked against the specs
    and the ranges.

    Raises
    ------
    InputError
        When a static dimension differs, one name takes two sizes, or a size is outside its
        range.
    """
    bound: dict[str, int] = {}
    for shape, spec in zip(shapes, specs):
        if len(shape) != len(spec.shape):
            raise InputError(f"input {spec.name!r} has shape {tuple(shape)}, the model "
                             f"expects {spec.shape_text()}")
        for size, dim in zip(shape, spec.shape):
            if isinstance(dim, str):
                name, offset = dim_parts(dim)
                if bound.setdefault(name, int(size) - offset) != int(size) - offset:
                    raise InputError(f"dimension {dim} is {bound[name] + offset} by one input "
                                     f"and {int(size)} in input {spec.name!r}")
            elif int(size) != dim:
                raise InputError(f"input {spec.name!r} has shape {tuple(shape)}, the model "
                                 f"expects {spec.shape_text()}")
    for name, size in bound.items():
        r = ranges.get(name)
        if r is not None and not r.min <= size <= r.max:
            raise InputError(f"dimension {name} is {size}, outside the range this library "
                             f"serves ({r.min} to {r.max})")
    return bound


def split_ranged_dims(input_shapes: dict | None) -> tuple[dict, dict[str, ShapeRange]]:
    """Input shapes whose dimensions may be written ``"seq=1:512:128"`` (a named dimension
    with its range: the form records and measurement tasks store a dynamic shape in) ->
    ``(shapes with plain names, {name: ShapeRange})``."""
    shapes, ranges = {}, {}
    for name, dims in (input_shapes or {}).items():
        plain = []
        for dim in dims:
            if isinstance(dim, str) and "=" in dim:
                dim_name, r = parse_shape_range(dim)
                if ranges.setdefault(dim_name, r) != r:
                    raise ModelError(f"dimension {dim_name} is given two ranges, "
                                     f"{ranges[dim_name]} and {r}")
                plain.append(dim_name)
            elif isinstance(dim, str) and not dim.isdigit():
                plain.append(dim)
            else:
                plain.append(int(dim))
        shapes[name] = tuple(plain)
    return shapes, ranges


def ranged_shapes(model) -> dict[str, list]:
    """``{source input name: dims}`` of `model`, a dynamic dimension written with its range
    (``"seq=1:512:128"``): what :func:`~tvm_hetero.load_model` takes back as `input_shapes`."""
    ranges = model.shape_ranges
    return {spec.source_name or spec.name:
            [f"{d}={ranges[d]}" if isinstance(d, str) and d in ranges else d
             for d in spec.shape]
            for spec in model.inputs}


__all__ = ["RANGES_ATTR", "ShapeRange", "as_ranges", "bind_dims", "check_points", "dim_parts",
           "dim_size", "is_dimension_text",
           "module_ranges", "parse_shape_range", "point", "ranged_shapes", "split_ranged_dims",
           "used_ranges", "with_ranges"]
