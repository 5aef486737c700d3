"""The shape of the code: the limits the project keeps, checked on the source (ast), not by eye.

- no module over 650 lines and no function over 100 (docstring included), in the package,
  experiments, tests and docs scripts;
- every package module declares ``__all__``;
- an underscore name is used in its own module only: nothing imports one from another module,
  and no test imports one.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = sorted((ROOT / "absorbjax").rglob("*.py"))
SOURCES = PACKAGE + sorted([*ROOT.glob("experiments/*.py"), *ROOT.glob("tests/*.py"), *ROOT.glob("docs/*.py")])


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", SOURCES, ids=rel)
def test_modules_and_functions_stay_short(path):
    source = path.read_text()
    assert source.count("\n") <= 650, f"{rel(path)} has {source.count(chr(10))} lines (at most 650)"
    long = [
        f"{node.name} (line {node.lineno}): {node.end_lineno - node.lineno + 1} lines"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 100
    ]
    assert not long, f"{rel(path)}: functions over 100 lines: {long}"


@pytest.mark.parametrize("path", [p for p in PACKAGE if p.name != "__main__.py"], ids=rel)
def test_every_package_module_declares_all(path):
    assert "__all__" in {
        t.id
        for n in ast.parse(path.read_text()).body
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name)
    }, f"{rel(path)} has no __all__"


def private_imports(path: Path) -> list[str]:
    """``from m import _x`` and ``import m._x`` / ``from m._x import y`` in a test (a private module)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            found += [f"from {node.module} import {a.name}" for a in node.names if private(a.name)]
            if path.parent.name == "tests" and any(private(part) for part in (node.module or "").split(".")):
                found.append(f"from {node.module} import …")
        elif isinstance(node, ast.Import) and path.parent.name == "tests":
            found += [f"import {a.name}" for a in node.names if any(private(p) for p in a.name.split("."))]
    return found


def test_no_underscore_name_crosses_a_module():
    found = {rel(p): private_imports(p) for p in SOURCES}
    assert not {k: v for k, v in found.items() if v}, found
