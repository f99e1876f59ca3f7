"""What every course widget shares: when to switch itself off, and which ipywidgets it talks to."""

import os


def under_nbgrader() -> bool:
    """Return True while nbgrader validates or autogrades the notebook."""
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def ipywidgets_major() -> int | None:
    """Return the installed ipywidgets major version (7 on Colab, 8 in current JupyterLab), or None."""
    try:
        import ipywidgets
    except ImportError:
        return None
    return int(ipywidgets.__version__.split(".")[0])


def widgets_enabled() -> bool:
    """Return True when a live widget should be shown: a kernel with ipywidgets, and not under nbgrader."""
    if under_nbgrader() or ipywidgets_major() is None:
        return False
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


INERT_MESSAGE = ("(Interactive widget switched off: nbgrader is running this notebook, or there is no "
                 "Jupyter kernel with ipywidgets. The results below come from the same functions, without "
                 "the UI.)")
