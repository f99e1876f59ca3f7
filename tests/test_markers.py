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


def probe_opens_chromium_through_a_helper():
    _opens_a_browser()


def probe_executed(tmp_path):
    return _runs_a_notebook(tmp_path)


def probe_uses_the_fixture(probe_executed):
    assert probe_executed


def probe_reads_a_constant():
    assert REQUIRES_CUDA


def probe_uses_a_runner_as_a_module_attribute(tmp_path):
    execution.executed_copy(tmp_path, gpu=False)


# The probes are reached through this table, so that these tests, which only read them, earn no marker.
PROBES = {name: value for name, value in globals().items() if name.startswith("probe_")}


class Item:
    """What markers_of reads of a collected test: its function and its fixtures' definitions."""

    def __init__(self, obj, *fixtures):
        self.obj = obj
        self._fixtureinfo = type("Info", (), {"name2fixturedefs": {
            f.__name__: [type("Def", (), {"func": f})()] for f in fixtures}})()


def test_a_test_that_opens_chromium_through_a_helper_is_marked_browser():
    assert markers.markers_of(Item(PROBES["probe_opens_chromium_through_a_helper"])) == {"browser"}


def test_a_fixture_that_executes_a_notebook_marks_the_tests_that_use_it_notebook():
    item = Item(PROBES["probe_uses_the_fixture"], PROBES["probe_executed"])
    assert markers.markers_of(item) == {"notebook"}


def test_a_test_that_only_reads_a_constant_of_the_runner_s_module_stays_unmarked():
    assert markers.markers_of(Item(PROBES["probe_reads_a_constant"])) == set()


def test_a_runner_used_as_a_module_attribute_is_found():
    assert markers.markers_of(Item(PROBES["probe_uses_a_runner_as_a_module_attribute"])) == {"notebook"}


def test_these_tests_earn_no_marker(request):
    assert markers.markers_of(request.node) == set()
