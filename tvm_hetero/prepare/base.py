"""What the preparation passes share: running a mutator over every Relax function of a module."""

from __future__ import annotations

from tvm import relax


def rewrite_functions(mod, mutator):
    """`mutator` (a ``PyExprMutator`` made for `mod`) applied to every Relax function of
    `mod`; returns the new module (the input is not modified)."""
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get()
