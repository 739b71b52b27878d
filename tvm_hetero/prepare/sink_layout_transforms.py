"""SinkLayoutTransforms: the blocked layout carried through resizes, pools and channel
concatenations that TVM's layout conversion leaves NCHW."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from .base import rewrite_functions
from .constants_at_full_rank import BINARY
from .merge_concatenated_convs import ELEMENTWISE_UNARY

_TRANSFORM = "relax.layout_transform"
_CONCAT = "relax.concat"
_POOLS = ("relax.nn.max_pool2d", "relax.nn.avg_pool2d")
_RESIZE = "relax.image.resize2d"


def _mapped(index_map, indices) -> list[int] | None:
    from tvm.sym import Analyzer

    analyzer = Analyzer()
    try:
        return [int(analyzer.simplify(v)) for v in index_map.map_indices(indices)]
    except (TypeError, ValueError, tvm.error.TVMError):
        return None


def _static_shape(expr) -> list[int] | None:
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    try:
        return [int(v) for v in ty.shape]
    except TypeError:  # symbolic dimensions
        return None


def unblock_lanes(call) -> int | None:
    """The lanes ``l`` of a ``layout_transform`` call from ``NCHW[l]c`` to NCHW, else None."""
    if not isinstance(call, relax.Call) or getattr(call.op, "name", "") != _TRANSFORM \
            or call.attrs.pad_value is not None:
        return None
    shape = _static_shape(call.args[0])
    if shape is None or len(shape) != 5 or _static_shape(call) != [
            shape[0], shape[1] * shape[4], shape[2], shape[3]]:
        return None
    lanes = shape[4]
    samples = ((0, 1, 2, 3, lanes - 1), (0, 2, 3, 1, 1))  # (n, c, h, w, lane)
    ok = all(_mapped(call.attrs.index_map, list(s)) == [s[0], s[1] * lanes + s[4], s[2], s[3]]
             for s in samples)
    return lanes if ok else None


def block_lanes(call) -> int | None:
    """The lanes ``l`` of a ``layout_transform`` call from NCHW to ``NCHW[l]c``, else None."""
    if not isinstance(call, relax.Call) or getattr(call.op, "name", "") != _TRANSFORM \
            or call.attrs.pad_value is not None:
        return None
    shape, out = _static_shape(call.args[0]), _static_shape(call)
    if shape is None or out is None or len(shape) != 4 or len(out) != 5 \
            or shape[1] != out[1] * out[4]:
        return None
    lanes = out[4]
    ok = all(_mapped(call.attrs.index_map, [0, c, 2, 3]) == [0, c // lanes, 2, 3, c % lanes]
             for c in (lanes + 1, 2 * lanes - 1))
    return lanes if ok else None


def _blocked_constant(const, lanes: int):
    """A rank-4 NCHW constant in ``NCHW[lanes]c``, or None where its channel axis is neither
    1 nor whole blocks."""
    value = const.value.numpy()
    if value.ndim == 0:
        return const
    if value.ndim != 4 or (value.shape[1] != 1 and value.shape[1] % lanes):
        return None
    n, c, h, w = value.shape
    if c == 1:
        return relax.const(value.reshape(n, 1, h, w, 1))
    return relax.const(np.ascontiguousarray(
        value.reshape(n, c // lanes, lanes, h, w).transpose(0, 1, 3, 4, 2)))


def _unblock(blocked):
    """``layout_transform`` of a ``NCHW[l]c`` expression to NCHW."""
    lanes = _static_shape(blocked)[4]
    return relax.op.layout_transform(
        blocked, index_map=lambda n, c, h, w, lane: (n, c * lanes + lane, h, w))


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    def _blocked_source(self, expr):
        """``(blocked expression, lanes)`` when `expr` is bound to a transform out of the
        blocked layout, else None."""
        value = self.lookup_binding(expr) if isinstance(expr, relax.Var) else None
        lanes = unblock_lanes(value)
        return None if lanes is None else (value.args[0], lanes)

    def _pool_or_resize(self, call):
        attrs = call.attrs
        if str(attrs.layout) != "NCHW" or str(getattr(attrs, "out_layout", "NCHW")) != "NCHW":
            return call
        source = self._blocked_source(call.args[0])
        if source is None:
            return call
        blocked, lanes = source
        layout = f"NCHW{lanes}c"
        if call.op.name == _RESIZE:
            new = relax.op.image.resize2d(
                blocked, call.args[1], roi=[float(v) for v in attrs.roi], layout=layout,
                method=attrs.method,
                coordinate_transformation_mode=attrs.coordinate_transformation_mode,
                rounding_method=attrs.rounding_method, cubic_alpha=attrs.cubic_alpha,
                cubic_exclude=attrs.cubic_exclude,
                extrapolation_value=attrs.extrapolation_value,
                out_dtype=attrs.out_dtype if str(attrs.out_dtype) else None)
        else:
            make = relax.op.nn.max_pool2d if call.op.name == _POOLS[0] else \
                relax.op.nn.avg_pool2d
            new = make(blocked, pool_size=attrs.pool_size, strides=attrs.strides,
                       padding=attrs.padding, dilation=attrs.dilation,
                       ceil_mode=attrs.ceil_mode, count_include_pad=attrs.count_include_pad,
                       layout=layout, out_layout=layout)
        return _unblock(self.builder_.emit(new))

    def _elementwise(self, call):
        """An elementwise op of a transform out of the blocked layout (and constants, or
        another such transform of the same shape) in the blocked layout."""
        shape = _static_shape(call)
        if shape is None or len(shape) != 4:
            return call
        args, lanes = [], None
        for arg in call.args:
            source = self._blocked_source(arg)
            if source is not None:
                if _static_shape(arg) != shape or lanes not in (None, source[1]):
                    return call
                lanes = source[1]
                args.append(source)
            elif isinstance(arg, (relax.Var, relax.Call, relax.Tuple)):
                return call
            else:  # a constant, or a scalar attribute argument (clip's bounds)
                args.append(arg)
        if lanes is None:
            return call
        blocked = []
        for arg in args:
            if isinstance(arg, tuple):
                blocked.append(arg[0])
            elif isinstance(arg, tvm.ir.GenericConst):
                const = _blocked_constant(arg, lanes)
                if const is None:
                    return call
                blocked.append(const)
            else:
                blocked.append(arg)
        return _unblock(self.builder_.emit(relax.Call(call.op, blocked, call.attrs,
                                                      call.ty_args)))

    def _concat(self, call):
        if int(call.attrs.axis) != 1:
            return call
        fields = call.args[0]
        if isinstance(fields, relax.Var):
            fields = self.lookup_binding(fields)
        if not isinstance(fields, relax.Tuple) or len(fields.fields) < 2:
            return call
        sources = [self._blocked_source(f) for f in fields.fields]
        lanes = {s[1] for s in sources if s is not None}
        if len(lanes) != 1:
            return call
        (lanes,) = lanes
        blocked = []
        for field, source in zip(fields.fields, sources):
            if source is not None:
                blocked.append(source[0])
                continue
            shape = _static_shape(field)  # an NCHW input: blocked here, not the whole after
            if shape is None or len(shape) != 4 or shape[1] % lanes:
                return call
            blocked.append(self.builder_.emit(relax.op.layout_transform(
                field, index_map=lambda n, c, h, w: (n, c // lanes, h, w, c % lanes))))
        return _unblock(self.builder_.emit(relax.op.concat(blocked, axis=1)))

    def visit_call_(self, call):
        call = super().visit_call_(call)
        name = getattr(call.op, "name", "")
        if name in _POOLS or name == _RESIZE:
            return self._pool_or_resize(call)
        if name == _CONCAT:
            return self._concat(call)
        if name in ELEMENTWISE_UNARY or name in BINARY:
            return self._elementwise(call)
        lanes = block_lanes(call)
        source = self._blocked_source(call.args[0]) if lanes is not None else None
        if source is not None and source[1] == lanes:
            return source[0]  # back into the layout it came out of
        return call


@tvm.transform.module_pass(opt_level=0, name="tvm_hetero.SinkLayoutTransforms")
class SinkLayoutTransforms:
    """After TVM's layout conversion, a transform out of the blocked layout ``NCHW[l]c`` moves
    past the ops that can run blocked: a resize or a max or average pool of it runs blocked;
    a channel concatenation of such transforms (all of one ``l``; NCHW inputs of whole blocks
    of channels are blocked first) concatenates the blocked tensors; an elementwise op of it
    and constants (or another such transform) runs blocked, its constants blocked; a
    transform back into the blocked layout is the blocked tensor. So the transforms stay
    where the layout really changes: TVM's layout inference converts no resize (it asks for
    axis swaps only), nor a concatenation of an NCHW input, nor what follows them, and a
    U-Net's upsampling and skip concatenations cost a transform out and back per tensor.
    Transforms left unread are removed.
    """

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        mod = rewrite_functions(mod, _Rewriter(mod))
        return relax.transform.DeadCodeElimination()(mod)
