"""tests/markers.py: a test is marked by what it and its fixtures run, followed through helpers."""

from book import execution
from book.execution import REQUIRES_CUDA, execute_notebook
from tests import markers
from tests.browser_support import launched_chromium


def _opens_a_browser():
    with launched_chromium():
        pass


def _runs_a_notebook(path):
    return execute_notebook(path, gpu=False)


def _reads_a_constant():
    return REQUIRES_CUDA


class Item:
    """What markers_of reads of a collected test: its function and its fixtures' definitions."""

    def __init__(self, obj, *fixtures):
        self.obj = obj
        self._fixtureinfo = type("Info", (), {"name2fixturedefs": {
            f.__name__: [type("Def", (), {"func": f})()] for f in fixtures}})()


def test_a_test_that_opens_chromium_through_a_helper_is_marked_browser():
    def test():
        _opens_a_browser()

    assert markers.markers_of(Item(test)) == {"browser"}


def test_a_fixture_that_executes_a_notebook_marks_the_tests_that_use_it_notebook():
    def executed(tmp_path):
        return _runs_a_notebook(tmp_path)

    def test(executed):
        assert executed

    assert markers.markers_of(Item(test, executed)) == {"notebook"}


def test_a_test_that_only_reads_a_constant_of_the_runner_s_module_stays_unmarked():
    def test():
        assert _reads_a_constant()

    assert markers.markers_of(Item(test)) == set()


def test_a_runner_used_as_a_module_attribute_is_found():
    def test(tmp_path):
        execution.executed_copy(tmp_path, gpu=False)

    assert markers.markers_of(Item(test)) == {"notebook"}
