"""The parallel run's order (tests/schedule.py): the longest modules first, each module kept whole."""

from pathlib import Path

from tests.schedule import LONGEST_FIRST, longest_first, module_of

TESTS = Path(__file__).resolve().parent


def test_every_module_named_as_long_exists_once():
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    assert [name for name in LONGEST_FIRST if not (TESTS / f"{name}.py").is_file()] == []


def test_the_long_modules_go_first_in_their_order_and_the_rest_keep_theirs():
    collected = ["tests/test_units.py::test_a", "tests/test_hub_redteam.py::test_b[x::y]",
                 "tests/test_units.py::test_c", "tests/test_ps01_tensors_and_devices.py::Test::test_d",
                 "tests/test_hub_autograde.py::test_e", "tests/test_hub_redteam.py::test_f"]
    order = [collected[i] for i in longest_first(collected)]
    assert order == ["tests/test_hub_autograde.py::test_e", "tests/test_hub_redteam.py::test_b[x::y]",
                     "tests/test_hub_redteam.py::test_f", "tests/test_units.py::test_a",
                     "tests/test_units.py::test_c", "tests/test_ps01_tensors_and_devices.py::Test::test_d"]


def test_a_module_is_named_by_its_file():
    assert module_of("tests/test_colab.py::test_x[notebooks/00-start-here.ipynb]") == "test_colab"
