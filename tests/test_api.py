"""The public API, names and signatures, against the committed snapshot ``tests/api_snapshot.txt``;
and the NumPy decision without JAX.

The public API is every name in the ``__all__`` of ``absorbjax`` and of its namespaces (the modules
that ``absorbjax.__all__`` names, plus :data:`EXTRA`): for a function its ``inspect.signature``
(annotations as written),
for a class its constructor's signature, its public fields and its public members (methods with
their signatures, properties, attributes), for anything else its type and short value. A change to
any of them fails :func:`test_public_api_matches_the_snapshot` with the diff; if the change is meant,
list it in CHANGELOG.md and regenerate the snapshot with one command from the repository root:

    python tests/test_api.py --update

(or ``ABSORBJAX_UPDATE_API=1 pytest -n 0 tests/test_api.py``), then review ``git diff
tests/api_snapshot.txt`` and commit it with the change.
"""

import dataclasses
import difflib
import enum
import importlib
import inspect
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "tests" / "api_snapshot.txt"
EXTRA = (  # public, not flat
    "absorbjax.testing",
    "absorbjax.condition.width",
    *(f"absorbjax.lab.{m}" for m in ("figstyle", "origin", "plotting", "reproduce", "stall", "stats")),
)
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def namespaces() -> list[str]:
    """``absorbjax``, then every module its ``__all__`` names and :data:`EXTRA`, sorted."""
    import absorbjax

    names = [f"absorbjax.{n}" for n in absorbjax.__all__ if inspect.ismodule(getattr(absorbjax, n))]
    return ["absorbjax", *sorted({*names, *EXTRA})]


def signature(obj) -> str:
    try:
        return _ADDRESS.sub("", str(inspect.signature(obj)))
    except (TypeError, ValueError):  # a builtin without a signature
        return "(...)"


def value(obj) -> str:
    text = _ADDRESS.sub("", repr(obj)).replace(str(ROOT), "<repo>")
    return f"{type(obj).__name__} = {text}" if len(text) <= 100 and "\n" not in text else type(obj).__name__


def annotation(hint) -> str:
    return hint if isinstance(hint, str) else inspect.formatannotation(hint)


def members(cls) -> list[str]:
    """The public fields of ``cls`` (dataclass or NamedTuple, in order; enum members), then the public
    members it defines or inherits from absorbjax classes (not from builtins, ``enum`` or ``typing``),
    sorted: methods with signatures, properties, attributes."""
    fields = []
    if dataclasses.is_dataclass(cls):
        fields = [
            (f.name, f"  field {f.name}: {annotation(f.type)}")
            for f in dataclasses.fields(cls)
            if not f.name.startswith("_")
        ]
    elif issubclass(cls, tuple) and hasattr(cls, "_fields"):
        fields = [(name, f"  field {name}") for name in cls._fields]
    elif issubclass(cls, enum.Enum):
        fields = [(m.name, f"  member {m.name} = {m.value!r}") for m in cls]
    skip = {name for name, _ in fields}
    rest = {}
    for klass in cls.__mro__:
        if not klass.__module__.startswith("absorbjax"):
            continue
        for name, attr in vars(klass).items():
            if name.startswith("_") or name in skip or name in rest:
                continue
            if isinstance(attr, property):
                rest[name] = f"  property {name}"
            elif isinstance(attr, (staticmethod, classmethod)):
                rest[name] = f"  {type(attr).__name__} {name}{signature(attr.__func__)}"
            elif inspect.isfunction(attr):
                rest[name] = f"  method {name}{signature(attr)}"
            else:
                rest[name] = f"  attribute {name}: {value(attr)}"
    return [line for _, line in fields] + [rest[k] for k in sorted(rest)]


def describe(qualname: str, obj) -> list[str]:
    if inspect.ismodule(obj):
        return [f"{qualname}: module {obj.__name__}"]
    if inspect.isclass(obj):
        bases = ", ".join(b.__name__ for b in obj.__bases__)
        return [f"{qualname}: class({bases}){signature(obj)}", *members(obj)]
    if callable(obj):
        return [f"{qualname}: {type(obj).__name__}{signature(obj)}"]
    return [f"{qualname}: {value(obj)}"]


def snapshot() -> str:
    """The public API as text, one namespace after another (``absorbjax`` last), names sorted; a class
    or function exported again under another name is written once, then as ``= <first name>``."""
    lines, first = [], {}
    for space in [*namespaces()[1:], "absorbjax"]:
        module = importlib.import_module(space)
        public = getattr(module, "__all__", None)
        lines.append(f"## {space}")
        if public is None:
            lines.append("  NO __all__")
            continue
        for name in sorted(public):
            obj, qualname = getattr(module, name, _missing), f"{space}.{name}"
            if obj is _missing:
                lines.append(f"{qualname}: MISSING")
            elif name == "__version__":  # the installed version, not the API
                lines.append(f"{qualname}: {type(obj).__name__}")
            elif (inspect.isclass(obj) or inspect.isfunction(obj)) and id(obj) in first:
                lines.append(f"{qualname}: = {first[id(obj)]}")
            else:
                first.setdefault(id(obj), qualname)
                lines += describe(qualname, obj)
        lines.append("")
    return "\n".join(lines)


_missing = object()


def test_public_api_matches_the_snapshot():
    current = snapshot()
    if os.environ.get("ABSORBJAX_UPDATE_API"):
        SNAPSHOT.write_text(current)
    committed = SNAPSHOT.read_text() if SNAPSHOT.exists() else ""
    diff = list(difflib.unified_diff(committed.splitlines(), current.splitlines(), "snapshot", "now", lineterm=""))
    assert not diff, (
        "the public API differs from tests/api_snapshot.txt (- snapshot, + now); if meant, list the change "
        "in CHANGELOG.md and run `python tests/test_api.py --update`:\n" + "\n".join(diff[:200])
    )


def test_a_name_public_in_two_namespaces_is_one_object():
    """One name, one meaning: a name in the ``__all__`` of two namespaces is a re-export of one object
    (the flat API, ``condition``'s width names), never two things that share a name."""
    seen, clashes = {}, []
    for space in namespaces():
        module = importlib.import_module(space)
        for name in module.__all__:
            obj = getattr(module, name)
            if name in seen and seen[name][1] is not obj:
                clashes.append(f"{name}: {seen[name][0]} and {space}")
            seen.setdefault(name, (space, obj))
    assert not clashes, clashes


def test_no_public_function_takes_keyword_arguments_it_does_not_name():
    """One way to pass options: no public function or method has ``**kwargs`` (what would pass
    through it is a parameter that ``help()``, editors and the snapshot show, or a field of an
    options object), matplotlib's helpers included. A class is read by its own signature (what
    ``help()`` shows: ``absorbjax.nn``'s Flax modules show their ``__init__``'s, not Flax's
    metaclass's) and by the ``__init__`` and methods it defines."""
    found = []
    for space in namespaces():
        module = importlib.import_module(space)
        for name in module.__all__:
            obj, qualname = getattr(module, name), f"{space}.{name}"
            if inspect.isclass(obj):
                own = [
                    (k, v)
                    for klass in obj.__mro__
                    if klass.__module__.startswith("absorbjax")
                    for k, v in vars(klass).items()
                ]
                funcs = [(qualname, obj)] + [
                    (f"{qualname}.{k}", v) for k, v in own if inspect.isfunction(v) and (k == "__init__" or k[0] != "_")
                ]
            else:
                funcs = [(qualname, obj)] if callable(obj) else []
            for where, f in funcs:
                try:
                    kinds = [p.kind for p in inspect.signature(f).parameters.values()]
                except (TypeError, ValueError):  # a builtin without a signature
                    continue
                if inspect.Parameter.VAR_KEYWORD in kinds:
                    found.append(where)
    assert not found, f"public callables taking **kwargs: {found}"


@pytest.mark.integration  # a child process
def test_the_snapshot_sees_signatures_and_fields():
    """The snapshot would notice a renamed argument, a changed default, a new field or method."""

    @dataclasses.dataclass(frozen=True)
    class Box:
        size: int = 1

        def scaled(self, factor: float = 2.0) -> int:
            return self.size

    Box.__module__ = "absorbjax.example"
    assert describe("m.f", lambda params, *, tol=1e-6: 0) == ["m.f: function(params, *, tol=1e-06)"]
    assert describe("m.Box", Box) == [
        "m.Box: class(object)(size: int = 1) -> None",
        "  field size: int",
        "  method scaled(self, factor: float = 2.0) -> int",
    ]
    assert describe("m.RTOL", 1e-3) == ["m.RTOL: float = 0.001"]


# ---------------------------------------------------------------- the decision without JAX


def run_without_jax(code: str) -> str:
    """Run ``code`` in a fresh interpreter on this checkout; it fails if JAX gets imported."""
    script = textwrap.dedent(code) + "\nimport sys\nassert 'jax' not in sys.modules, 'JAX was imported'\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_import_absorbjax_condition_does_not_import_jax():
    run_without_jax("import absorbjax.condition, sys; assert 'jax' not in sys.modules")


@pytest.mark.slow
def test_the_numpy_decision_runs_without_jax():
    """``find_absorbing_set`` and ``distance`` on NumPy weights (float64 and bfloat16) answer without
    importing JAX: an absorbable block built from ``W_down[:,S] = −W_up[S,:]⁻¹`` and a generic one."""
    out = run_without_jax(
        """
        import ml_dtypes
        import numpy as np
        from absorbjax import condition, models

        rng = np.random.default_rng(0)
        d, n = 3, 7
        up = rng.standard_normal((n, d))
        down = rng.standard_normal((d, n))
        down[:, :d] = -np.linalg.inv(up[:d])
        yes = condition.find_absorbing_set(models.MLPParams(up, down), "gelu")
        assert yes.status == "absorbable" and list(yes.S) == [0, 1, 2], yes
        generic = models.MLPParams(rng.standard_normal((n, d)), rng.standard_normal((d, n)))
        no = condition.find_absorbing_set(generic, "relu")
        assert no.status == "not_absorbable", no
        far = condition.distance(generic, "gelu")
        assert 0 < far.lower <= far.upper, far
        half = models.MLPParams(up.astype(ml_dtypes.bfloat16), down.astype(ml_dtypes.bfloat16))
        assert condition.find_absorbing_set(half, "gelu").rounding.within == "yes"
        print(yes.status, no.status, far.lower, far.upper)
        """
    )
    status_yes, status_no, lower, upper = out.split()
    assert (status_yes, status_no) == ("absorbable", "not_absorbable") and 0 < float(lower) <= float(upper)


def test_reading_the_activation_facts_does_not_import_jax():
    run_without_jax(
        """
        from absorbjax import activations, models
        assert activations.get("gelu").converse() == "Thm 10"
        assert activations.get("swiglu").never_absorbs and activations.get("glu").gate_at_zero == 0.5
        assert activations.get("leaky_relu(0.25)").odd_slope == 1.25
        models.check_layout(models.MLPParams(up=[[1.0, 0.0]] * 3, down=[[1.0] * 3] * 2))
        """
    )


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python tests/test_api.py --update   (rewrites tests/api_snapshot.txt)")
    sys.path.insert(0, str(ROOT))
    SNAPSHOT.write_text(snapshot())
    print(f"wrote {SNAPSHOT.relative_to(ROOT)}")
