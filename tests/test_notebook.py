"""The Colab notebook runs top to bottom in a fresh kernel that has no absorbjax, from a folder
outside the checkout: its install cell installs the checkout (``ABSORBJAX_SRC``, a copy, so that
pip's ``build/`` stays out of it), where a Colab user's installs the repository URL kept in
pyproject's ``[project.urls]``."""

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import nbformat
import pytest
import tomllib
from nbclient import NotebookClient

pytestmark = pytest.mark.integration  # runs the notebook

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "experiments" / "colab.ipynb"


def install_cell() -> str:
    return next(
        c.source
        for c in nbformat.read(NOTEBOOK, as_version=4).cells
        if c.cell_type == "code" and "ABSORBJAX_SRC" in c.source
    )


def test_notebook_installs_the_repository_url_by_default():
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    default = re.search(r'ABSORBJAX_SRC = os\.environ\.get\("ABSORBJAX_SRC", "([^"]+)"\)', install_cell()).group(1)
    assert default == "git+" + urls["Repository"]


def setuptools_version() -> tuple[int, ...]:
    try:
        from importlib.metadata import version

        return tuple(int(p) for p in version("setuptools").split(".")[:2])
    except Exception:  # not installed, or an unusual version string
        return (0,)


def bare_kernel(tmp_path: Path) -> tuple[str, dict, Path]:
    """A kernel whose Python sees this environment's packages (jax, ipykernel, pip, …) but not
    absorbjax: a venv with a path entry to our site-packages, whose .pth files (absorbjax's
    editable install among them) are not processed there."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "_parent_environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    spec = tmp_path / "jupyter" / "kernels" / "bare"
    spec.mkdir(parents=True)
    argv = [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "bare", "language": "python"}))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('absorbjax'))"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == "None", "the bare kernel must not see absorbjax before the install cell"
    return "bare", {"JUPYTER_PATH": str(tmp_path / "jupyter")}, Path(site)


def test_colab_notebook_executes_outside_the_checkout(tmp_path, monkeypatch):
    name, env, site = bare_kernel(tmp_path)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    src = tmp_path / "absorbjax-src"  # pip builds in the source folder; a copy keeps the checkout clean
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__", ".venv"))
    monkeypatch.setenv("ABSORBJAX_SRC", str(src))
    if setuptools_version() >= (77,):  # build with this environment's setuptools, offline; else pip fetches one
        monkeypatch.setenv("PIP_NO_BUILD_ISOLATION", "false")
    work = tmp_path / "work"
    work.mkdir()
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # execute() raises CellExecutionError on the first cell that fails
    NotebookClient(nb, timeout=900, kernel_name=name, resources={"metadata": {"path": str(work)}}).execute()
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.output_type == "stream")
    assert "residual-free order 8" in text
    assert (site / "absorbjax" / "__init__.py").is_file()  # the install cell installed the checkout there
