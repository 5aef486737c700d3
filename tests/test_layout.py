"""The shape of the code: the limits the project keeps, checked on the source (ast), not by eye.

- no module over 650 lines and no function over 100 (docstring included), in the package,
  experiments, benchmarks, tests and docs scripts;
- implementation modules are private (``_x.py``): every public module of the package is a
  namespace whose API ``tests/test_api.py`` snapshots (or the command line), and declares
  ``__all__``; a private module declares none, so each namespace's ``__all__`` is the one that
  says what is public;
- no import circle among the package's modules.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = sorted((ROOT / "absorbjax").rglob("*.py"))
SCRIPTS = ("experiments/**/*.py", "benchmarks/*.py", "tests/*.py", "docs/*.py")
SOURCES = PACKAGE + sorted(path for pattern in SCRIPTS for path in ROOT.glob(pattern))


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


def declares_all(path: Path) -> bool:
    return "__all__" in {
        t.id
        for n in ast.parse(path.read_text()).body
        if isinstance(n, (ast.Assign, ast.AnnAssign))
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        if isinstance(t, ast.Name)
    }


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


PUBLIC = [p for p in PACKAGE if not any(private(part) for part in module_name(p).split("."))]
COMMAND_LINE = {"absorbjax.cli", "absorbjax.__main__"}


def test_public_modules_are_the_snapshotted_namespaces():
    """A module without an underscore anywhere in its name is public: it must be one of the
    namespaces whose names and signatures ``tests/test_api.py`` snapshots, or the command line."""
    from test_api import namespaces

    extra = {module_name(p) for p in PUBLIC} - set(namespaces()) - COMMAND_LINE
    assert not extra, f"public modules outside the API snapshot (make them private, _x.py): {sorted(extra)}"


@pytest.mark.parametrize("path", PUBLIC, ids=rel)
def test_every_public_module_declares_all(path):
    assert declares_all(path) or path.name == "__main__.py", f"{rel(path)} has no __all__"


@pytest.mark.parametrize("path", [p for p in PACKAGE if p not in PUBLIC], ids=rel)
def test_private_modules_declare_no_all(path):
    assert not declares_all(path), f"{rel(path)} is private: its names go public through its namespace's __all__"


def test_no_import_circle():
    """No module of the package imports, directly or through others, one that imports it back
    (every ``from absorbjax… import``, a function's lazy ones too): data flows one way."""
    root = ROOT / "absorbjax"
    modules = {}
    for path in root.rglob("*.py"):
        name = ".".join(("absorbjax", *path.relative_to(root).with_suffix("").parts))
        modules[name.removesuffix(".__init__")] = path
    edges = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("absorbjax"):
                for alias in node.names:
                    target = f"{node.module}.{alias.name}"
                    edges[name].add(target if target in modules else node.module)
    state: dict = {}

    def visit(name, trail):
        state[name] = "open"
        for nxt in sorted(edges[name] & modules.keys()):
            assert state.get(nxt) != "open", f"import circle: {' -> '.join([*trail, name, nxt])}"
            if nxt not in state:
                visit(nxt, [*trail, name])
        state[name] = "done"

    for name in sorted(modules):
        if name not in state:
            visit(name, [])
