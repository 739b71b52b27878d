"""The one helper for one-line error text, and the package's import hygiene: no module imports
a private name of another tvm_hetero module."""

import ast
from pathlib import Path

import tvm_hetero
from tvm_hetero.errors import error_message

PACKAGE = Path(tvm_hetero.__file__).parent


def test_the_message_is_the_last_line_that_is_not_a_traceback_frame():
    err = RuntimeError("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                       "  at tvm::relax::Foo()\nInternalError: Check failed: lanes > 0\n")
    assert error_message(err) == "InternalError: Check failed: lanes > 0"
    assert error_message(err, with_type=True) == \
        "RuntimeError: InternalError: Check failed: lanes > 0"


def test_an_rpc_error_is_the_remote_line():
    err = RuntimeError("RPCError: Error caught from RPC call:\nValueError: no such device\n"
                       "  File \"server.py\", line 9\n")
    assert error_message(err) == "remote: ValueError: no such device"
    assert error_message(err, with_type=True) == "remote: ValueError: no such device"


def test_an_exception_without_text_is_its_type_and_the_cut_applies():
    assert error_message(TimeoutError()) == "TimeoutError"
    assert error_message(TimeoutError(), with_type=True) == "TimeoutError"
    assert error_message(ValueError("x" * 50), with_type=True, max_chars=20) == \
        "ValueError: " + "x" * 8


def _private_imports(path: Path) -> list[str]:
    """``from <tvm_hetero module> import _name`` in one file (TVM's own privates excluded)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom):
            continue
        ours = node.level > 0 or (node.module or "").startswith("tvm_hetero")
        found += [f"{path.relative_to(PACKAGE)}:{node.lineno} {alias.name}"
                  for alias in node.names
                  if ours and alias.name.startswith("_") and not alias.name.startswith("__")]
    return found


def test_no_module_imports_a_private_name_of_another():
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) for hit in _private_imports(path)]
    assert found == []
