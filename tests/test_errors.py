"""The one helper for one-line error text, and the package's house rules: no module imports a
private name of another tvm_hetero module, no import circle (function-local imports count), no
file over 500 lines."""

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


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The package's modules `path` imports anywhere in it (inside functions too): for ``from
    X import y`` the module ``X.y`` where that is one, else ``X``."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(parent + ([node.module] if node.module else []))
            for alias in node.names:
                target = f"{base}.{alias.name}"
                found.add(target if target in modules else base)
    return {module for module in found if module in modules and module != name}


def test_no_import_circle_inside_the_package():
    import networkx as nx

    paths = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph = nx.DiGraph()
    graph.add_nodes_from(paths)
    for name, path in paths.items():
        graph.add_edges_from((name, target) for target in _imported_modules(path, set(paths)))
    circles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert circles == []


def test_the_import_graph_sees_relative_imports():
    # layers/extract.py imports classify and layered (relative imports)
    assert _module_name(PACKAGE / "layers" / "extract.py") == "tvm_hetero.layers.extract"
    wanted = {"tvm_hetero.layers.layered", "tvm_hetero.layers.classify"}
    assert _imported_modules(PACKAGE / "layers" / "extract.py", wanted) == wanted


