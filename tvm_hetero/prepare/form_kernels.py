"""Form kernels: the layout transforms that the CPU forms of preparation add
(:mod:`.device_forms`), marked so that they are no layer of their own
(:func:`tvm_hetero.classify.classify_bindings` places each with the layer it serves)."""

from __future__ import annotations

import tvm
from tvm import relax

from ..relax_ir import FORM_KERNEL_ATTR, OP_KINDS_ATTR, main_bindings

_TRANSFORM_OPS = ("layout_transform", "te_layout_transform")


def has_layout_transforms(mod) -> bool:
    """Whether ``main`` of a Relax module calls ``relax.layout_transform``."""
    return any(isinstance(b.value, relax.Call) and getattr(b.value.op, "name", "")
               == "relax.layout_transform" for b in main_bindings(mod))


def mark_form_kernels(mod):
    """`mod` with every PrimFunc that only transforms a layout marked a form kernel
    (``FORM_KERNEL_ATTR``). Run on preparations of models whose own graph has no layout
    transform: there, every layout transform is one that the CPU forms added."""
    out = mod
    for gv, func in mod.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc) and func.attrs is not None:
            kinds = func.attrs.get(OP_KINDS_ATTR)
            if kinds and all(str(k) in _TRANSFORM_OPS for k in kinds):
                if out is mod:
                    out = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs,
                                       global_infos=mod.global_infos)
                out[gv] = func.with_attr(FORM_KERNEL_ATTR, True)
    return out
