"""The parallel run's order (tests/schedule.py): the longest modules first, each module kept whole."""

from pathlib import Path

from tests.schedule import LONGEST_FIRST, longest_first, module_of

TESTS = Path(__file__).resolve().parent


def test_every_module_named_as_long_exists_once():
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    assert [name for name in LONGEST_FIRST if len(list(TESTS.rglob(f"{name}.py"))) != 1] == []


def test_the_long_modules_go_first_in_their_order_and_the_rest_keep_theirs():
    units, redteam, autograde = "tests/devicelab/test_units.py", "tests/hub/test_hub_redteam.py", \
        "tests/hub/test_hub_autograde.py"
    ps01 = "tests/exercises/test_ps01_tensors_and_devices.py"
    collected = [f"{units}::test_a", f"{redteam}::test_b[x::y]", f"{units}::test_c", f"{ps01}::Test::test_d",
                 f"{autograde}::test_e", f"{redteam}::test_f"]
    order = [collected[i] for i in longest_first(collected)]
    assert order == [f"{autograde}::test_e", f"{redteam}::test_b[x::y]", f"{redteam}::test_f",
                     f"{units}::test_a", f"{units}::test_c", f"{ps01}::Test::test_d"]


def test_a_module_is_named_by_its_file():
    assert module_of("tests/lessons/test_colab.py::test_x[notebooks/00-start-here.ipynb]") == "test_colab"
