"""Widgets switch themselves off under nbgrader and outside a kernel."""

from devicelab.ui import ipywidgets_major, under_nbgrader, widgets_enabled


def test_nbgrader_switches_widgets_off(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert under_nbgrader() and not widgets_enabled()
    monkeypatch.delenv("NBGRADER_EXECUTION")
    assert not under_nbgrader()


def test_no_kernel_means_no_widget(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert widgets_enabled() is False  # pytest is not a Jupyter kernel


def test_ipywidgets_major_is_7_or_8():
    assert ipywidgets_major() in (7, 8)
