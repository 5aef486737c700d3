"""The public modules carry doctested ``Examples:``; `pytest` runs them (``--doctest-modules``
over the package, see pyproject's addopts), so a wrong example fails the suite once, here."""

import doctest
import importlib
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# module: the fewest examples it must keep
EXAMPLES = {
    "absorbjax.activations": 1, "absorbjax.condition.decide": 1, "absorbjax.condition.width": 5,
    "absorbjax.dimension": 8, "absorbjax.fit.config": 1, "absorbjax.fit.driver": 1, "absorbjax.fit.expand": 1,
    "absorbjax.fit.loss": 1, "absorbjax.fit.measure": 1, "absorbjax.models": 1, "absorbjax.nn": 3,
    "absorbjax.probes": 1, "absorbjax.reproduce": 1,
}


def test_pytest_runs_the_package_doctests():
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--doctest-modules" in options["addopts"].split() and "absorbjax" in options["testpaths"]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_public_module_has_examples(name):
    tests = doctest.DocTestFinder().find(importlib.import_module(name))
    assert sum(len(t.examples) for t in tests) >= EXAMPLES[name], name
