"""mkdocs hook: the pages and figures derived from ``figures/`` made at build time, never committed.

The site serves only ``docs/``; rather than committed copies (which a rerun of ``absorbjax
reproduce`` would leave stale), the hook adds when the site is built

- every page of :func:`gen_pages.built_pages` (``results/index.md``: every claim of every record), and
- each figure the records' claims name (:func:`gen_pages.result_figures`) as ``results/NAME.png``,
  read from ``figures/NAME.png``.

A stray file of the same name under ``docs/`` is replaced. Named in ``mkdocs.yml`` under ``hooks:``
(mkdocs ≥ 1.6, which puts this folder on ``sys.path`` while it loads the hook).
"""

from __future__ import annotations

from gen_pages import ROOT, built_pages, result_figures
from mkdocs.structure.files import File, Files

__all__ = ["on_files"]


def on_files(files: Files, config) -> Files:
    """``files`` with the generated results pages and every figure they show."""
    figures = ROOT / "figures"
    made = [File.generated(config, uri, content=text) for uri, text in built_pages(figures).items()]
    made += [
        File.generated(config, f"results/{name}.png", abs_src_path=str(path))
        for name, path in result_figures(figures).items()
    ]
    for file in made:
        stray = files.get_file_from_path(file.src_uri)
        if stray is not None:
            files.remove(stray)
        files.append(file)
    return files
