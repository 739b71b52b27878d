"""The fix registry: :data:`FIXES`, :func:`fix`, and the two lookups every fix uses.

TVM's ``from_onnx`` takes no converter map of its own, so the importer
(:mod:`tvm_hetero.frontend.onnx.importer`) tries :data:`FIXES` before TVM's converter. A fix is
a function ``fix(importer, inputs, attrs, opset)`` returning the Relax expression, or ``None``
where TVM's own converter is right for that node. Each fix names the onnx backend-test case
that needed it (``tests/frontend/onnx/test_fixes.py`` runs them).
"""

from __future__ import annotations

from collections.abc import Callable

#: op type -> fix(importer, inputs, attrs, opset) -> Relax expression, or None for TVM's own
FIXES: dict[str, Callable] = {}


def fix(*op_types: str):
    """Register a converter fix for the given ONNX op types.

    Parameters
    ----------
    *op_types : str
        The ONNX op types the decorated function converts.

    Returns
    -------
    callable
        A decorator that adds its function to :data:`FIXES` and returns it unchanged.
    """
    def register(func):
        for op_type in op_types:
            FIXES[op_type] = func
        return func
    return register


def constant_value(expr):
    """The numpy value of a Relax constant, else None.

    Parameters
    ----------
    expr : relax.Expr
        A converter input.

    Returns
    -------
    numpy.ndarray or None
    """
    import tvm

    if isinstance(expr, tvm.ir.GenericConst):
        return expr.value.numpy()
    return None


def node_name(attrs) -> str:
    """The ONNX node's name, from the attributes TVM's importer gives a converter.

    Parameters
    ----------
    attrs : dict
        The node's attributes (TVM puts the name under ``tvm_custom``).

    Returns
    -------
    str
        The name, or ``""``.
    """
    return attrs.get("tvm_custom", {}).get("name", "") or ""
