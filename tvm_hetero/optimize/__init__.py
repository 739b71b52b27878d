"""Target-specific code optimizations: a table from (device family, layer kind) to rules.

Each layer's kernel is scheduled by the rules of ITS device: in a CPU + CUDA module a CPU
layer and a CUDA layer get different rules. Rules are tried in order; the first that returns a
scheduled function wins. A layer no rule schedules keeps TVM's default loops, with a logged
reason (GPU layers must be scheduled: an unscheduled GPU kernel is a build error, never silent
host code).

The table is data: list it with ``tvm-hetero optimizations`` or :func:`table_rows`, extend it
with :func:`register_rule`::

    def my_conv_rule(func, target):
        ...  # return a scheduled PrimFunc, or None to pass
    tvm_hetero.optimize.register_rule("cpu", "conv2d", Rule("mine", "my conv schedule",
                                                             my_conv_rule))
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

from ..layers import LAYER_KINDS, OP_KINDS_ATTR, kernel_kind
from .cpu import (PACKED_WEIGHTS_ATTR, blocked_conv2d, concat_copies, layout_copies,
                  packed_conv2d, parallel_loops, pixel_lanes_1x1, pooling_rows,
                  reduction_chains, split_k_gemv, tiled_reduction, winograd_conv2d)

logger = logging.getLogger(__name__)

FAMILIES = ("cpu", "cuda", "other")
# Bumped whenever a default rule changes the code it generates (or how kernels are timed: 4 is
# the first with TVM's runtime on every CPU thread; 6 has pooling-rows,
# 7 sends residual convolutions with whole tiled vectors to tiled, 8 sends every 1x1
# stride-1 convolution to pixel-lanes-1x1, 9 has concat-copies, reduction-chains and
# split-k-gemv, 10 blocked-nchwc and blocked pools, 11 pads small convolutions' input per
# parallel task and compares tuned kernels in alternating rounds): tuned-vs-rules comparisons
# stored in a tuning database under another version are measured again.
RULES_VERSION = 12


@dataclass(frozen=True)
class Rule:
    """One optimization: ``apply(func, target)`` returns a scheduled PrimFunc or None."""

    name: str
    description: str
    apply: Callable


def _dlight(rule_cls_name: str, package: str):
    """A rule applying one dlight rule class (``tvm.s_tir.dlight.<package>.<name>``)."""

    def apply(func, target):
        from tvm.s_tir import dlight as dl

        rule = getattr(getattr(dl, package), rule_cls_name)()
        with target:
            result = rule.apply(func, target, False)
        if result is None:
            return None
        sch = result[0] if isinstance(result, list) else result
        return sch.mod["main"]

    return apply


def _gpu_rules() -> list[Rule]:
    return [Rule(f"dlight.gpu.{name}", f"TVM dlight GPU rule {name}", _dlight(name, "gpu"))
            for name in ("Matmul", "GEMV", "Reduction", "GeneralReduction", "Fallback")]


PARALLEL = Rule("parallel-loops", "inline injective blocks; outer spatial loops fused and "
                "parallel, innermost spatial loop innermost (vectorized by LLVM)",
                parallel_loops)
TILED = Rule("tiled", "register tiles of output rows x vector lanes accumulated over the "
              "whole reduction; epilogue computed per tile; parallel tiles", tiled_reduction)
PACKED = Rule("packed-weights", "vector lanes along output channels, the weight repacked "
               "[F/lanes, C, KH, KW, lanes] at build time; register tiles of channel vectors x "
               "output columns; epilogue per tile", packed_conv2d)
BLOCKED = Rule("blocked-nchwc", "convolutions in the blocked layout NCHW16c: register tiles "
                "of channel blocks x output columns, each a contiguous vector; epilogue per "
                "tile", blocked_conv2d)
WINOGRAD = Rule("winograd", "3x3 stride-1 convolutions as Winograd F(4x4, 3x3) in NCHW16c "
                 "(chosen at preparation): one parallel task per row of output tiles computes "
                 "its input transform, the channel products in register tiles, the inverse "
                 "transform and the epilogue", winograd_conv2d)
PIXEL_LANES = Rule("pixel-lanes-1x1", "1x1 stride-1 convolutions: a matrix product with "
                    "vector lanes along the pixels (contiguous output and residual); register "
                    "tiles of channels x pixel vectors", pixel_lanes_1x1)
POOLING_ROWS = Rule("pooling-rows", "windowed pooling: one output row per parallel task, "
                    "updated with vectors of output columns per window offset; padding "
                    "computed first", pooling_rows)
LAYOUT_COPIES = Rule("layout-copies", "layout transforms: the loop along the read's "
                     "contiguous axis innermost and vectorized, the others fused and parallel",
                     layout_copies)
CONCAT_COPIES = Rule("concat-copies", "concatenations: the concatenation axis partitioned "
                     "where each input starts, one contiguous parallel copy per input",
                     concat_copies)
REDUCTION_CHAINS = Rule("reduction-chains", "a window of its own per output (global pools, "
                        "means): several outputs per task, their accumulators independent "
                        "chains in registers", reduction_chains)
SPLIT_K_GEMV = Rule("split-k-gemv", "matrix-vector products with a [reduction, output] "
                    "weight: parallel slices of the reduction, each streaming whole weight "
                    "rows into a partial output; the partials added last", split_k_gemv)
CPU_GEMV = Rule("dlight.cpu.GEMV", "TVM dlight CPU rule for matrix-vector products",
                _dlight("GEMV", "cpu"))
CPU_REDUCTION = Rule("dlight.cpu.Reduction", "TVM dlight CPU rule for reductions",
                     _dlight("Reduction", "cpu"))

_TABLE: dict[tuple[str, str], list[Rule]] = {}


def _defaults() -> None:
    for kind in LAYER_KINDS:
        _TABLE[("cpu", kind)] = [PARALLEL]
        _TABLE[("cuda", kind)] = _gpu_rules()
        _TABLE[("other", kind)] = _gpu_rules()
    _TABLE[("cpu", "conv2d")] = [WINOGRAD, BLOCKED, PIXEL_LANES, PACKED, TILED, PARALLEL]
    _TABLE[("cpu", "matmul")] = [SPLIT_K_GEMV, TILED, CPU_GEMV, PARALLEL]
    _TABLE[("cpu", "pooling")] = [POOLING_ROWS, REDUCTION_CHAINS, PARALLEL]
    _TABLE[("cpu", "reduction")] = [REDUCTION_CHAINS, PARALLEL, CPU_REDUCTION]
    _TABLE[("cpu", "elementwise")] = [CONCAT_COPIES, LAYOUT_COPIES, PARALLEL]


_defaults()


def register_rule(family: str, kind: str, rule: Rule, first: bool = True) -> None:
    """Add `rule` for layers of `kind` on devices of `family` (tried first by default)."""
    if family not in FAMILIES or kind not in LAYER_KINDS:
        raise ValueError(f"unknown (family, kind) ({family!r}, {kind!r}): families "
                         f"{FAMILIES}, kinds {LAYER_KINDS}")
    rules = _TABLE.setdefault((family, kind), [])
    rules.insert(0, rule) if first else rules.append(rule)


def reset_table() -> None:
    """Back to the default rules."""
    _TABLE.clear()
    _defaults()


def rules_for(family: str, kind: str) -> list[Rule]:
    return list(_TABLE.get((family, kind), []))


def table_rows() -> list[tuple[str, str, list[str]]]:
    """``(family, layer kind, rule names)`` for every entry of the table."""
    return [(family, kind, [r.name for r in _TABLE[(family, kind)]])
            for family in FAMILIES for kind in LAYER_KINDS]


def _family(target) -> str:
    kind = target.kind.name
    if kind in ("llvm", "c"):
        return "cpu"
    return "cuda" if kind == "cuda" else "other"


def optimize_function(func, target):
    """Schedule one kernel by the table; returns (func, rule name or None)."""
    kind = kernel_kind(func)
    for rule in rules_for(_family(target), kind):
        try:
            scheduled = rule.apply(func, target)
        except Exception as err:  # a rule that does not fit this kernel passes it on
            logger.debug("rule %s failed: %s", rule.name, err)
            continue
        if scheduled is not None:
            keep = {k: v for k, v in func.attrs.items()} if func.attrs is not None else {}
            return scheduled.with_attrs(keep) if keep else scheduled, rule.name
    return func, None


def OptimizeLayers(tuning=None, chosen: dict | None = None):  # noqa: N802 (TVM pass style)
    """A module pass scheduling every PrimFunc that has a target by its (family, kind) rules.

    A kernel scheduled with a packed weight (the ``packed-weights`` rule) changes its weight
    parameter's layout; the pass then gives it its weight in that layout
    (:func:`repack_weight_arguments`).

    Parameters
    ----------
    tuning : TuningDatabase, optional
        Kernels tuned there (and measured faster than the rules) take their tuned schedule.
    chosen : dict, optional
        Filled with ``{kernel name: rule name}`` (``"meta-schedule"`` for tuned kernels,
        None where TVM's default loops stay).
    """
    import tvm
    from tvm import tirx

    @tvm.transform.module_pass(opt_level=0, name="tvm_hetero.OptimizeLayers")
    def optimize_layers(mod, _ctx):
        from ..errors import BuildError

        out = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs,
                           global_infos=mod.global_infos)
        for gv, func in mod.functions_items():
            if not isinstance(func, tirx.PrimFunc) or func.attrs is None \
                    or "target" not in func.attrs or OP_KINDS_ATTR not in func.attrs:
                continue
            target = func.attrs["target"]
            tuned = tuning.schedule(func, target) if tuning is not None else None
            if tuned is not None:
                scheduled, rule = tuned, TUNED
            else:
                scheduled, rule = optimize_function(func, target)
            if rule is None:
                if _family(target) != "cpu":
                    raise BuildError(f"no rule schedules kernel {gv.name_hint} for "
                                     f"{target.kind.name}: it would silently run as host code")
                logger.info("kernel %s keeps TVM's default loops: no CPU rule applies",
                            gv.name_hint)
            if chosen is not None:
                chosen[gv.name_hint] = rule
            out[gv] = scheduled
        return repack_weight_arguments(out)

    return optimize_layers


def pack_weight(array, lanes: int):
    """``[F, ...] -> [F / lanes, ..., lanes]``: the layout of ``PACKED_WEIGHTS_ATTR`` kernels."""
    import numpy as np

    packed = array.reshape(array.shape[0] // lanes, lanes, *array.shape[1:])
    return np.ascontiguousarray(np.moveaxis(packed, 1, -1))


def _pack_weight_func(shape, dtype: str, lanes: int, target):
    """A kernel computing :func:`pack_weight` (for a weight that is not a constant)."""
    from tvm import te

    weight = te.placeholder(shape, dtype, name="weight")
    packed = te.compute((shape[0] // lanes, *shape[1:], lanes),
                        lambda block, *rest: weight[(block * lanes + rest[-1], *rest[:-1])],
                        name="packed")
    func = te.create_prim_func([weight, packed])
    return (parallel_loops(func, target) or func).with_attr("target", target)


def repack_weight_arguments(mod):
    """Give every kernel scheduled with a packed weight (``PACKED_WEIGHTS_ATTR``) its weight
    in that layout: a constant argument is repacked here, at build time (once per constant);
    any other argument through a packing kernel on the same device, each call."""
    import tvm
    from tvm import relax, tirx

    packed = {gv: (int(func.attrs[PACKED_WEIGHTS_ATTR][0]), int(func.attrs[PACKED_WEIGHTS_ATTR][1]),
                   func.attrs["target"])
              for gv, func in mod.functions_items()
              if isinstance(func, tirx.PrimFunc) and func.attrs is not None
              and PACKED_WEIGHTS_ATTR in func.attrs}
    if not packed:
        return mod
    call_tir = tvm.ir.Op.get("relax.call_tir")
    mod, prepacked = _pack_lifted_weights(mod, packed)
    kernels = {gv: mod[gv] for gv in packed}
    mod = tvm.IRModule({gv: func for gv, func in mod.functions_items() if gv not in packed},
                       attrs=mod.attrs, global_infos=mod.global_infos)
    renamed: dict = {}

    @relax.expr_functor.mutator
    class Repack(relax.PyExprMutator):
        def __init__(self):
            super().__init__(mod)
            # the kernels' signatures changed: added again, their GlobalVars get the new types
            for gv, func in kernels.items():
                renamed[gv] = self.builder_.add_func(func, gv.name_hint)
            self.constants: list = []  # (original, lanes, packed)
            self.pack_funcs: dict = {}

        def visit_global_var_(self, gv):
            return renamed.get(gv, gv)

        def visit_call_(self, call):
            call = self.visit_expr_post_order(call)
            if not call.op.same_as(call_tir):
                return call
            callee = next((gv for gv, new in renamed.items() if new.same_as(call.args[0])), None)
            if callee is None:
                return call
            index, lanes, target = packed[callee]
            fields = list(call.args[1].fields)
            fields[index] = self._packed(fields[index], lanes, target)
            return relax.Call(call.op, [call.args[0], relax.Tuple(fields), *call.args[2:]],
                              call.attrs, call.ty_args)

        def _packed(self, arg, lanes, target):
            if any(arg.same_as(var) for var in prepacked):
                return arg
            ty = arg.ty
            shape = [int(d) for d in ty.shape]
            packed_shape = [shape[0] // lanes, *shape[1:], lanes]
            new_ty = relax.TensorType(packed_shape, ty.dtype, ty.vdevice)
            if isinstance(arg, tvm.ir.GenericConst):
                for original, known_lanes, done in self.constants:
                    if original.same_as(arg) and known_lanes == lanes:
                        return done
                data = tvm.runtime.tensor(pack_weight(arg.value.numpy(), lanes))
                done = tvm.ir.GenericConst(data, new_ty)
                self.constants.append((arg, lanes, done))
                return done
            key = (tuple(shape), str(ty.dtype), lanes, str(target))
            if key not in self.pack_funcs:
                self.pack_funcs[key] = self.builder_.add_func(
                    _pack_weight_func(shape, str(ty.dtype), lanes, target), "pack_weight")
            return self.builder_.emit(relax.call_tir(self.pack_funcs[key], [arg], new_ty))

    rewriter = Repack()
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    return rewriter.builder_.get()


def _pack_lifted_weights(mod, packed):
    """Pack, in ``hetero_weights()``, the lifted weights (weights read on a device other than
    the first: parameters of ``main``) that only packed kernels read, each in one layout: once
    when the model loads instead of at each call. Returns the module and ``main``'s packed
    parameters."""
    import tvm
    from tvm import relax

    from ..annotate import WEIGHTS_FUNC, _substitute
    from ..layers import main_bindings

    names = {gv.name_hint for gv, _ in mod.functions_items()}
    main = mod["main"] if "main" in names else None
    if WEIGHTS_FUNC not in names or main is None or main.attrs is None \
            or "num_input" not in main.attrs:
        return mod, []
    lifted = list(main.params[int(main.attrs["num_input"]):])
    call_tir = tvm.ir.Op.get("relax.call_tir")
    layouts: dict[int, set] = {}  # lifted index -> lanes of each use (None: not a packed use)
    for binding in main_bindings(mod):
        value = binding.value
        is_call_tir = isinstance(value, relax.Call) and value.op.same_as(call_tir)
        spec = packed.get(value.args[0]) if is_call_tir else None
        args = list(value.args[1].fields) if is_call_tir else \
            list(relax.analysis.free_vars(value))
        for position, arg in enumerate(args):
            for index, param in enumerate(lifted):
                if arg.same_as(param):
                    layouts.setdefault(index, set()).add(
                        spec[1] if spec is not None and position == spec[0] else None)
    lanes_of = {index: next(iter(uses)) for index, uses in layouts.items()
                if len(uses) == 1 and None not in uses}
    if not lanes_of:
        return mod, []

    weights = mod[WEIGHTS_FUNC]
    copies = {binding.var: binding.value for block in weights.body.blocks
              for binding in block.bindings}
    builder = relax.BlockBuilder()
    with builder.function(WEIGHTS_FUNC, [], attrs={"global_symbol": WEIGHTS_FUNC}):
        outputs = []
        for index, field in enumerate(weights.body.body.fields):
            copy = copies[field]  # to_vdevice(constant, its device)
            constant = copy.args[0]
            if index in lanes_of:
                data = pack_weight(constant.value.numpy(), lanes_of[index])
                constant = tvm.ir.GenericConst(tvm.runtime.tensor(data), relax.TensorType(
                    list(data.shape), str(data.dtype)))
            outputs.append(builder.emit(relax.op.to_vdevice(constant, copy.attrs.dst_vdevice)))
        builder.emit_func_output(relax.Tuple(outputs))
    params, renamed = list(main.params), {}
    for index, lanes in lanes_of.items():
        old = lifted[index]
        shape = [int(d) for d in old.ty.shape]
        new = relax.Var(old.name, relax.TensorType(
            [shape[0] // lanes, *shape[1:], lanes], old.ty.dtype, old.ty.vdevice))
        params[params.index(old)] = renamed[old] = new
    functions = dict(mod.functions_items())
    for gv in functions:
        if gv.name_hint == WEIGHTS_FUNC:
            functions[gv] = builder.get()[WEIGHTS_FUNC]
        elif gv.name_hint == "main":
            functions[gv] = relax.Function(params, _substitute(main.body, renamed), None,
                                           main.is_pure, main.attrs)
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos), \
        list(renamed.values())


TUNED = "meta-schedule"


__all__ = ["FAMILIES", "OptimizeLayers", "Rule", "TUNED", "optimize_function", "pack_weight",
           "register_rule", "repack_weight_arguments", "reset_table", "rules_for", "table_rows"]
