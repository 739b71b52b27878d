"""The README says only what is true: every `tvm-hetero` command it shows parses (unknown flags
fail), the cheap ones run, its first Python example runs, and every `tvm_hetero` name it uses
exists. The README is a user's first page: at most 180 lines."""

import argparse
import ast
import os
import re
import shlex

import pytest

import tvm_hetero
from tvm_hetero.cli.main import main, make_parser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
MAX_LINES = 200


def _text() -> str:
    with open(README, encoding="utf-8") as handle:
        return handle.read()


def _code_blocks(language: str | None = None) -> list[str]:
    """The fenced code blocks, those of `language` when given (``python``)."""
    blocks = re.findall(r"^```(\w*)\n(.*?)^```", _text(), flags=re.S | re.M)
    return [body for lang, body in blocks if language is None or lang == language]


def _commands() -> list[str]:
    """Every `tvm-hetero ...` command line of the code blocks, continuation lines joined and
    comments dropped."""
    commands = []
    for block in _code_blocks():
        pending = ""
        for line in block.splitlines():
            code = line.split("#", 1)[0].rstrip()
            if pending:
                pending += " " + code.strip()
            elif code.startswith("tvm-hetero"):
                pending = code
            else:
                continue
            if pending.endswith("\\"):
                pending = pending[:-1].rstrip()
            else:
                commands.append(pending)
                pending = ""
    return commands


def test_readme_is_short():
    lines = _text().count("\n")
    assert lines <= MAX_LINES, f"README.md has {lines} lines (at most {MAX_LINES})"


def test_readme_shows_every_subcommand():
    shown = {shlex.split(c)[1] for c in _commands() if len(shlex.split(c)) > 1}
    action = next(a for a in make_parser()._actions
                  if isinstance(a, argparse._SubParsersAction))
    subcommands = set(action.choices)
    assert subcommands <= shown, f"not shown in README.md: {sorted(subcommands - shown)}"


@pytest.mark.parametrize("command", _commands())
def test_readme_command_parses(command):
    args = shlex.split(command)
    assert args[0] == "tvm-hetero"
    try:
        parsed = make_parser().parse_args(args[1:])
    except SystemExit as exit:  # --help exits 0; a usage mistake (unknown flag) 2
        assert exit.code == 0 and "--help" in args, f"does not parse: {command}"
        return
    assert getattr(parsed, "func", None), command


def _cheap(command: str) -> bool:
    args = shlex.split(command)
    return args[1] == "optimizations" or (args[1] == "inspect" and args[2].startswith("zoo:"))


@pytest.mark.parametrize("command", [c for c in _commands() if _cheap(c)])
def test_readme_cheap_command_runs(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(shlex.split(command)[1:]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.strip()


def test_readme_help_runs(capsys):
    for sub in ("devices", "tune", "compile", "run", "report"):
        with pytest.raises(SystemExit) as exit:
            main([sub, "--help"])
        assert exit.value.code == 0
    assert "--memory" in capsys.readouterr().out


def _resolve(dotted: str):
    """The object `dotted` (``th.DeviceSet.parse``, ``tvm_hetero.measure.rpc.RPCRunner``)
    names, `th` being tvm_hetero; importing submodules on the way."""
    import importlib

    parts = dotted.split(".")
    obj = tvm_hetero
    path = "tvm_hetero"
    for part in parts[1:]:
        if not hasattr(obj, part):
            try:
                obj = importlib.import_module(f"{path}.{part}")
            except ImportError:
                raise AttributeError(f"{dotted}: no {part!r} in {path}") from None
        else:
            obj = getattr(obj, part)
        path = f"{path}.{part}"
    return obj


def _python_names() -> set[str]:
    """Every tvm_hetero name the README's Python uses: attribute chains on `th` or on names
    imported from tvm_hetero, ``from tvm_hetero... import`` names, and `th.X` in the prose."""
    names = set()
    aliases = {}  # the README reads on: a block uses the imports of those before it
    for block in _code_blocks("python"):
        tree = ast.parse(block)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("tvm_hetero"):
                        aliases[alias.asname or alias.name] = "th" + alias.name[len("tvm_hetero"):]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tvm_hetero"):
                for alias in node.names:
                    dotted = "th" + node.module[len("tvm_hetero"):] + "." + alias.name
                    aliases[alias.asname or alias.name] = dotted
                    names.add(dotted)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                chain = []
                inner = node
                while isinstance(inner, ast.Attribute):
                    chain.append(inner.attr)
                    inner = inner.value
                if isinstance(inner, ast.Name) and inner.id in aliases:
                    names.add(".".join([aliases[inner.id], *reversed(chain)]))
    for match in re.finditer(r"`(?:th|tvm_hetero)((?:\.[A-Za-z_]\w*)+)", _text()):
        names.add("th" + match.group(1))
    return names


def test_readme_python_names_exist():
    names = _python_names()
    assert "th.build" in names and "th.api.compile_model" in names, sorted(names)
    missing = []
    for dotted in sorted(names):
        try:
            _resolve(dotted)
        except AttributeError as err:
            missing.append(str(err))
    assert not missing, missing


def test_readme_first_python_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    block = _code_blocks("python")[0]
    namespace = {}
    exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102
    assert namespace["same"].placement.assignment == namespace["placement"].assignment
    assert os.path.isfile(tmp_path / "vgg.so")


def test_readme_make_targets_exist():
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as handle:
        targets = set(re.findall(r"^([\w-]+):", handle.read(), flags=re.M))
    # `make X` in backticks, or a line of a code block that starts with it
    shown = set(re.findall(r"(?:`|^)make ([\w-]+)", _text(), flags=re.M))
    assert shown and shown <= targets, f"not Makefile targets: {sorted(shown - targets)}"
