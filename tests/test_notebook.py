"""The Colab notebook runs top to bottom in a fresh kernel."""

from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "experiments" / "colab.ipynb"


def test_colab_notebook_executes():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # execute() raises CellExecutionError on the first cell that fails
    NotebookClient(nb, timeout=900, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.output_type == "stream")
    assert "residual-free order 8" in text
