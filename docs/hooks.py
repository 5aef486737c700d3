"""mkdocs hook: the results pages' figures served from ``figures/``, where ``absorbjax reproduce``
writes them.

The site serves only ``docs/``; rather than a committed copy, each figure the records' claims name
(:func:`gen_pages.result_figures`) is added at build time as ``results/NAME.png``, read from
``figures/NAME.png``. A stray ``docs/results/NAME.png`` is replaced by it. Named in ``mkdocs.yml``
under ``hooks:`` (mkdocs ≥ 1.6, which puts this folder on ``sys.path`` while it loads the hook).
"""

from __future__ import annotations

from gen_pages import ROOT, result_figures
from mkdocs.structure.files import File, Files

__all__ = ["on_files"]


def on_files(files: Files, config) -> Files:
    """``files`` with ``results/NAME.png`` for every figure the results pages show."""
    for name, path in result_figures(ROOT / "figures").items():
        uri = f"results/{name}.png"
        stray = files.get_file_from_path(uri)
        if stray is not None:
            files.remove(stray)
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files
