"""Model loading: ONNX (path or ModelProto), Relax IRModule, torch ExportedProgram (or its
``.pt2`` file), ``zoo:NAME``.

Every loader returns a :class:`Model`: a Relax IRModule whose ``main`` takes the model inputs
only (weights are bound as constants), and the description of those inputs.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import io
import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._native import native_log_to_logging, quiet_native_stderr
from ..errors import ModelError, error_message
from .shape_ranges import dim_parts, dim_size, is_dimension_text

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class InputSpec:
    """One model input: its Relax parameter name, shape and dtype.

    A dimension of `shape` is a size, or the name of a dynamic dimension (``"seq"``) whose
    sizes the model's shape ranges give (:mod:`~tvm_hetero.frontend.shape_ranges`).
    """

    name: str
    shape: tuple
    dtype: str
    source_name: str | None = None  # the name in the source model (ONNX names may differ)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    def shape_text(self) -> str:
        return "(" + ", ".join(str(d) for d in self.shape) + ("," if len(self.shape) == 1
                                                               else "") + ")"

    def concrete_shape(self, dims: dict[str, int] | None = None) -> tuple[int, ...]:
        """The shape with each named dimension at its size in `dims`."""
        try:
            return tuple(d if isinstance(d, int) else dim_size(d, dims or {})
                         for d in self.shape)
        except KeyError as err:
            raise ModelError(f"input {self.name!r} has dynamic dimension {err.args[0]} "
                             "and no size was given for it") from None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "source_name": self.source_name or self.name}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "InputSpec":
        return cls(data["name"], tuple(d if isinstance(d, str) else int(d)
                                       for d in data["shape"]),
                   data["dtype"], data.get("source_name"))

    def random(self, rng: np.random.Generator,
               dims: dict[str, int] | None = None) -> np.ndarray:
        """Seeded random data of this input's shape (named dimensions at `dims`) and dtype."""
        shape = self.concrete_shape(dims)
        if np.issubdtype(np.dtype(self.dtype), np.integer):
            return rng.integers(0, 8, size=shape).astype(self.dtype)
        if self.dtype == "bool":
            return rng.integers(0, 2, size=shape).astype(bool)
        return rng.standard_normal(shape).astype(self.dtype)


@dataclass
class Model:
    """A loaded model.

    Attributes
    ----------
    name : str
        A short name (file stem or zoo name).
    mod : tvm.IRModule
        Relax module; ``main`` takes the inputs in ``inputs`` order, weights are constants.
    inputs : list of InputSpec
        The model inputs.
    onnx_model : onnx.ModelProto or None
        The ONNX source, when there is one (reference outputs come from onnxruntime).
    """

    name: str
    mod: Any
    inputs: list[InputSpec]
    onnx_model: Any = None
    source: str = ""
    _fingerprint: str | None = field(default=None, repr=False)
    _layered: Any = field(default=None, repr=False)  # see layered.layered_module

    def fingerprint(self) -> str:
        """A stable hash of the model's structure and weights."""
        if self._fingerprint is None:
            import tvm_ffi

            digest = hashlib.sha256(str(tvm_ffi.structural_hash(self.mod, map_free_vars=True))
                                    .encode())
            for spec in self.inputs:
                digest.update(repr((spec.name, spec.shape, spec.dtype)).encode())
            self._fingerprint = digest.hexdigest()[:16]
        return self._fingerprint

    @property
    def shape_ranges(self) -> dict:
        """``{dimension name: ShapeRange}`` of the dynamic dimensions (empty when static)."""
        from .shape_ranges import module_ranges

        return module_ranges(self.mod)

    @property
    def is_dynamic(self) -> bool:
        return any(not spec.is_static for spec in self.inputs)

    def dims_at(self, where: str = "opt") -> dict[str, int]:
        """Each dynamic dimension's size at ``"min"``, ``"opt"`` (the tuning point) or
        ``"max"`` of its range."""
        from .shape_ranges import point

        return point(self.shape_ranges, where)

    def random_inputs(self, seed: int = 0,
                      dims: dict[str, int] | None = None) -> dict[str, np.ndarray]:
        """Seeded random inputs, by input name; dynamic dimensions at `dims` (default: the
        tuning point of their ranges)."""
        rng = np.random.default_rng(seed)
        dims = self.dims_at("opt") if dims is None and self.is_dynamic else dims
        return {spec.name: spec.random(rng, dims) for spec in self.inputs}


def _onnx_input_specs(model) -> list[tuple[str, list, str]]:
    from onnx import helper

    init_names = {init.name for init in model.graph.initializer}
    out = []
    for value in model.graph.input:
        if value.name in init_names:
            continue  # old-style models list initializers as inputs too
        ttype = value.type.tensor_type
        if value.type.HasField("optional_type") and \
                value.type.optional_type.elem_type.HasField("tensor_type"):
            ttype = value.type.optional_type.elem_type.tensor_type  # an optional tensor
        elif not value.type.HasField("tensor_type"):
            kind = value.type.WhichOneof("value") or "value of no type"
            raise ModelError(f"model input {value.name!r} is a {kind.replace('_type', '')}; "
                             "tvm_hetero takes tensor inputs")
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                for d in ttype.shape.dim]
        out.append((value.name, dims, helper.tensor_dtype_to_np_dtype(ttype.elem_type).name))
    return out


def static_shape_hint(name: str, dims: list) -> str:
    """The ``--input-shape`` option that pins an input's dynamic dimensions.

    Parameters
    ----------
    name : str
        The input's name.
    dims : list of int or str
        Its dimensions: a size, or the name of a dynamic one (``"?"`` or ``0`` for one that
        has no name).

    Returns
    -------
    str
        E.g. ``--input-shape input_ids=1,<seq> with a number for <seq>``: the static sizes
        kept, each dynamic dimension a placeholder named after it (``<dim1>`` when it has
        no name).
    """
    parts, holes = [], []
    for axis, dim in enumerate(dims):
        if isinstance(dim, (int, np.integer)) and dim > 0:
            parts.append(str(int(dim)))
            continue
        label = str(dim) if isinstance(dim, str) and dim not in ("", "?") else f"dim{axis}"
        parts.append(f"<{label}>")
        if parts[-1] not in holes:
            holes.append(parts[-1])
    which = holes[0] if len(holes) == 1 else "each of " + ", ".join(holes)
    return f"--input-shape {name}={','.join(parts)} with a number for {which}"


def _rename_graph_tensors(graph, renames: dict[str, str]) -> None:
    """Rename tensors in a GraphProto (and the subgraphs of its nodes' attributes)."""
    for value in [*graph.input, *graph.output, *graph.value_info]:
        value.name = renames.get(value.name, value.name)
    for node in graph.node:
        node.input[:] = [renames.get(name, name) for name in node.input]
        node.output[:] = [renames.get(name, name) for name in node.output]
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                _rename_graph_tensors(sub, renames)


def _c_identifier_inputs(model, input_names: list[str]):
    """A copy of `model` whose inputs are C identifiers, and ``{new name: source name}``.

    Kernels name their parameters after the Relax variables, which take the ONNX input names:
    ``gpu_0/data_0`` (ResNet-50's input) is fine for LLVM but no identifier in the CUDA source,
    which then fails to compile. The importer only replaces dots, so every other character
    that C does not allow becomes ``_`` here (the model itself is left as it is).
    """
    taken = {init.name for init in model.graph.initializer}
    taken |= {out for node in model.graph.node for out in node.output} | set(input_names)
    renames = {}
    for name in input_names:
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            continue
        base = re.sub(r"[^A-Za-z0-9_]", "_", name)
        base = base if re.match(r"[A-Za-z_]", base) else "input_" + base
        new, suffix = base, 1
        while new in taken:
            new, suffix = f"{base}_{suffix}", suffix + 1
        taken.add(new)
        renames[name] = new
    if not renames:
        return model, {name: name for name in input_names}
    import onnx

    renamed = onnx.ModelProto()
    renamed.CopyFrom(model)
    _rename_graph_tensors(renamed.graph, renames)
    return renamed, {renames.get(name, name): name for name in input_names}


def _load_onnx(model, name: str, input_shapes: dict[str, tuple] | None,
               shape_ranges: dict | None = None) -> Model:
    import tvm

    from .onnx.importer import import_onnx
    from .shape_ranges import as_ranges, used_ranges, with_ranges

    specs = _onnx_input_specs(model)
    ranges = as_ranges(shape_ranges)
    shape_dict = {}
    for in_name, dims, _ in specs:
        if input_shapes and in_name in input_shapes:
            given = list(input_shapes[in_name])
            if len(given) != len(dims) and any(isinstance(d, str) for d in given):
                raise ModelError(f"input {in_name!r} has rank {len(dims)} {dims}; the shape "
                                 f"given, {given}, has rank {len(given)}")
            shape_dict[in_name] = given
        else:
            # a named dynamic dimension keeps its name when a range is given for it
            shape_dict[in_name] = list(dims)
        for dim in shape_dict[in_name]:
            pinned = bool(input_shapes) and in_name in input_shapes  # an empty axis may be given
            if isinstance(dim, int) and (dim > 0 or dim == 0 and pinned) \
                    or isinstance(dim, str) and is_dimension_text(dim) \
                    and dim_parts(dim)[0] in ranges:
                continue
            hint = static_shape_hint(in_name, dims)
            if isinstance(dim, str) and dim not in ("", "?"):
                raise ModelError(
                    f"model input {in_name!r} has a dynamic shape {dims}; give a static one "
                    f"({hint}) or a range for {dim} (--shape-range {dim}=MIN:MAX[:OPT])")
            raise ModelError(f"model input {in_name!r} has a dynamic shape {dims}; give a "
                             f"static one ({hint})")
    unknown = sorted(set(input_shapes or {}) - {s[0] for s in specs})
    if unknown:
        raise ModelError(f"input shape given for unknown input(s) {', '.join(unknown)}; "
                         f"the inputs are {', '.join(s[0] for s in specs)}")
    ranges = used_ranges(ranges, {dim_parts(d)[0] for dims in shape_dict.values()
                                  for d in dims if isinstance(d, str)})
    failure = None
    importable, source_names = _c_identifier_inputs(model, [s[0] for s in specs])
    new_names = {source: new for new, source in source_names.items()}
    # the importer prints its conversion errors on stdout: they belong in the error instead
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            mod = import_onnx(importable,
                              {new_names[k]: v for k, v in shape_dict.items()},
                              {new_names[s[0]]: s[2] for s in specs},
                              {d: (r.min, r.max) for d, r in ranges.items()})
        except Exception as err:  # the importer raises many kinds; all mean "cannot import"
            failure = err
    if failure is not None:
        what = name if isinstance(failure, tvm.error.OpNotImplemented) else f"ONNX model {name}"
        message = f"cannot import {what}: {error_message(failure)}"
        with quiet_native_stderr():  # the failed import's builders complain when freed
            failure = None
            gc.collect()
        raise ModelError(message)
    mod = with_ranges(mod, ranges)
    params = list(mod["main"].params)
    inputs = [InputSpec(p.name, tuple(d if isinstance(d, str) else int(d)
                                      for d in shape_dict[src]), dtype, src)
              for p, (src, _, dtype) in zip(params, specs)]
    return Model(name, mod, inputs, onnx_model=model)


def _load_relax(mod, name: str, shape_ranges: dict | None = None) -> Model:
    import tvm
    from tvm import relax

    from .shape_ranges import as_ranges, module_ranges, used_ranges, with_ranges

    if "main" not in [gv.name_hint for gv in mod.get_global_vars()]:
        raise ModelError("the Relax IRModule has no 'main' function")
    main = mod["main"]
    if not isinstance(main, relax.Function):
        raise ModelError("'main' of the IRModule is not a Relax function")
    num_input = main.attrs.get("num_input") if main.attrs else None
    params = list(main.params)
    if num_input is not None and int(num_input) < len(params):
        raise ModelError(
            f"'main' takes {len(params) - int(num_input)} weight parameter(s); bind them "
            "as constants first (relax.transform.BindParams)"
        )
    ranges = {**module_ranges(mod), **as_ranges(shape_ranges)}
    inputs, used = [], set()
    for p in params:
        ty = p.ty
        if not isinstance(ty, relax.TensorType) or ty.shape is None:
            raise ModelError(f"input {p.name!r} of 'main' is not a tensor of known shape")
        dims = []
        for d in ty.shape.values:
            if isinstance(d, tvm.tirx.IntImm):
                dims.append(int(d))
            elif isinstance(d, tvm.tirx.Var) and d.name in ranges:
                dims.append(d.name)
                used.add(d.name)
            else:
                shown = [str(v) for v in ty.shape.values]
                what = (f"give a range for {d.name} (shape_ranges={{{d.name!r}: (min, max, "
                        "opt)}})" if isinstance(d, tvm.tirx.Var)
                        else "a dimension must be a size or a variable with a range")
                raise ModelError(f"input {p.name!r} has a dynamic shape {shown}; {what}")
        inputs.append(InputSpec(p.name, tuple(dims), str(ty.dtype)))
    return Model(name, with_ranges(mod, used_ranges(ranges, used)), inputs)


TORCH_EXTRA = "pip install -e '.[torch]'"


def _load_torch(program, name: str, input_shapes: dict[str, tuple] | None = None,
                shape_ranges: dict | None = None) -> Model:
    import tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    try:
        mod = from_exported_program(program, keep_params_as_input=False)
    except Exception as err:
        raise ModelError(f"cannot import the PyTorch program: {error_message(err)}") from None
    mod = relax.transform.DecomposeOpsForInference()(mod)
    params = list(mod["main"].params)
    unknown = sorted(set(input_shapes or {}) - {p.name for p in params})
    if unknown:
        raise ModelError(f"input shape given for unknown input(s) {', '.join(unknown)}; "
                         f"the inputs are {', '.join(p.name for p in params)}")
    binding, renamed = {}, {}
    for param in params:
        if not input_shapes or param.name not in input_shapes:
            continue
        dims, given = list(param.ty.shape.values), tuple(input_shapes[param.name])
        fixed = [int(d) if isinstance(d, tvm.tirx.IntImm) else None for d in dims]
        if len(dims) != len(given) or any(f is not None and f != g
                                          for f, g in zip(fixed, given)):
            raise ModelError(f"input {param.name!r} has shape {[str(d) for d in dims]}; "
                             f"{list(given)} does not fit it")
        for dim, value in zip(dims, given):
            if isinstance(dim, tvm.tirx.Var) and isinstance(value, str):
                renamed.setdefault(dim.name, value)  # the name a range is given for
            elif isinstance(dim, tvm.tirx.Var):
                if binding.setdefault(dim.name, value) != value:
                    raise ModelError(f"dimension {dim.name} of input {param.name!r} is "
                                     f"given as both {binding[dim.name]} and {value}")
    binding.update({old: tvm.tirx.Var(new, "int64") for old, new in renamed.items()
                    if old != new})
    if binding:
        mod = relax.transform.BindSymbolicVars(binding)(mod)
    ranges = set(shape_ranges or {})
    for param in mod["main"].params:
        dims = list(param.ty.shape.values)
        if not all(isinstance(d, tvm.tirx.IntImm) or isinstance(d, tvm.tirx.Var)
                   and d.name in ranges for d in dims):
            shown = [int(d) if isinstance(d, tvm.tirx.IntImm) else str(d) for d in dims]
            raise ModelError(f"model input {param.name!r} has a dynamic shape {shown}; give "
                             f"a static one ({static_shape_hint(param.name, shown)}) or a "
                             "range for each dynamic dimension")
    if ranges:  # the exporter's bounds, not the range's, would size the buffers
        mod["main"] = mod["main"].without_attr("tir_var_upper_bound")
    return _load_relax(mod, name, shape_ranges)


def _load_torch_file(path: str, name: str | None, input_shapes, shape_ranges=None) -> Model:
    """A program saved with ``torch.export.save`` (``.pt2``)."""
    try:
        import torch
    except ImportError:
        raise ModelError(f"loading {os.path.basename(path)} (a torch.export program) needs "
                         f"PyTorch, which is not installed: {TORCH_EXTRA}") from None
    try:
        program = torch.export.load(path)
    except Exception as err:
        raise ModelError(f"{path} is not a saved torch.export program: "
                         f"{error_message(err)}") from None
    stem = os.path.splitext(os.path.basename(path))[0]
    loaded = _load_torch(program, name or stem, input_shapes, shape_ranges)
    loaded.source = os.path.abspath(path)
    return loaded


@native_log_to_logging()
def load_model(source: Any, name: str | None = None,
               input_shapes: dict[str, tuple] | None = None,
               shape_ranges: dict | None = None) -> Model:
    """Load a model from any supported source.

    Parameters
    ----------
    source : str, os.PathLike, onnx.ModelProto, tvm.IRModule or torch.export.ExportedProgram
        ``zoo:NAME`` for a built-in model, a path to an ``.onnx`` file or to a ``.pt2`` file
        (``torch.export.save``; needs PyTorch: ``pip install -e '.[torch]'``), or an in-memory
        model.
    name : str, optional
        A short name for reports; derived from the source when omitted.
    input_shapes : dict, optional
        Shapes for inputs whose shapes are dynamic (ONNX, or a torch program exported with
        dynamic dimensions): each dimension a size, or a name (``{"input_ids": (1, "seq")}``)
        that `shape_ranges` gives a range.
    shape_ranges : dict, optional
        ``{dimension name: (min, max[, opt])}`` (or a ``"min:max[:opt]"`` string, or a
        :class:`~tvm_hetero.frontend.shape_ranges.ShapeRange`) for each dynamic dimension kept
        dynamic: one library then serves every size in the range, tuned at ``opt`` (default
        ``max``). A dynamic dimension of the model named in the file (ONNX ``dim_param``)
        keeps its name.

    Returns
    -------
    Model
        The Relax module (weights bound as constants) and its input description.

    Raises
    ------
    ModelError
        If the source is missing, corrupt, has an unsupported op, or a dynamic dimension with
        neither a size nor a range.
    """
    import tvm

    from .shape_ranges import as_ranges, split_ranged_dims

    if isinstance(source, Model):
        return source
    input_shapes, inline_ranges = split_ranged_dims(input_shapes)
    shape_ranges = {**inline_ranges, **as_ranges(shape_ranges)} or None
    if isinstance(source, (str, os.PathLike)):
        text = os.fspath(source)
        if text.startswith("zoo:"):
            from .zoo import zoo_model

            zoo_name = text[4:]
            model = _load_onnx(zoo_model(zoo_name), name or zoo_name, input_shapes,
                               shape_ranges)
            model.source = text
            return model
        if text.endswith(".pt2"):
            if not os.path.isfile(text):
                raise ModelError(f"model file not found: {text}")
            return _load_torch_file(text, name, input_shapes, shape_ranges)
        return _load_onnx_file(text, name, input_shapes, shape_ranges)
    if isinstance(source, tvm.IRModule):
        return _load_relax(source, name or "relax_module", shape_ranges)
    type_name = type(source).__module__ + "." + type(source).__name__
    if type_name.startswith("onnx") and hasattr(source, "graph"):
        return _load_onnx(source, name or (source.graph.name or "onnx_model"), input_shapes,
                          shape_ranges)
    if type_name.startswith("torch.export"):
        return _load_torch(source, name or "torch_model", input_shapes, shape_ranges)
    raise ModelError(f"cannot load a model from a {type_name}; give zoo:NAME, an .onnx path, "
                     "an onnx.ModelProto, a Relax IRModule or a torch ExportedProgram")


def _load_onnx_file(path: str, name: str | None, input_shapes, shape_ranges=None) -> Model:
    import onnx

    if not os.path.exists(path):
        raise ModelError(f"model file not found: {path}")
    if os.path.isdir(path):
        raise ModelError(f"model path is a directory, not a file: {path}")
    try:
        model = onnx.load(path)
        onnx.checker.check_model(model)
    except Exception as err:
        raise ModelError(f"{path} is not a valid ONNX model: {error_message(err)}") from None
    if len(model.graph.node) == 0:
        raise ModelError(f"{path} is not a valid ONNX model: its graph has no nodes")
    stem = os.path.splitext(os.path.basename(path))[0]
    loaded = _load_onnx(model, name or stem, input_shapes, shape_ranges)
    loaded.source = os.path.abspath(path)
    return loaded
