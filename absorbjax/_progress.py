"""The progress bar of long runs: tqdm's widget in a notebook that can draw one, its text bar
everywhere else. (``tqdm.auto`` picks the widget in any notebook and warns there when ipywidgets is
missing, as in a fresh Colab or Jupyter kernel.)"""


def tqdm(*args, **kwargs):
    """``tqdm(iterable, **kwargs)``: ``tqdm.auto.tqdm`` when ipywidgets imports, else ``tqdm.std.tqdm``."""
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        from tqdm.std import tqdm as bar
    else:
        from tqdm.auto import tqdm as bar
    return bar(*args, **kwargs)
