"""The suite-time benchmark's simulation of two workers (benchmarks/suite_time.py), which orders
tests/schedule.py."""

from benchmarks.suite_time import Timed, by_module, order, simulate


def module(name: str, tests: int, cpu: float, wall: float) -> list[Timed]:
    """Return a module of equal tests that together take `cpu` and `wall` seconds when run alone."""
    return [Timed(name, "main", 0.0, wall / tests, cpu / tests) for _ in range(tests)]


def test_two_busy_modules_share_the_two_cores_and_waiting_costs_no_core():
    one_core = {"a": module("a", 5, 50, 50), "b": module("b", 5, 50, 50)}
    assert simulate(["a", "b"], one_core) == 50  # side by side, a core each
    two_cores = {"a": module("a", 5, 100, 50), "b": module("b", 5, 100, 50)}
    assert simulate(["a", "b"], two_cores) == 100  # each wants both cores: they take turns, in effect
    waiting = {"a": module("a", 5, 0, 50), "b": module("b", 5, 100, 50)}
    assert simulate(["a", "b"], waiting) == 50  # a module that waits leaves the cores to the other


def test_a_worker_takes_the_next_module_when_it_has_two_tests_left():
    # xdist's loadfile: "one" (a single test) leaves its worker with fewer than three tests pending, so that
    # worker takes "last" at once, to run after "one", though the other worker is free long before
    modules = {"one": module("one", 1, 0, 100), "many": module("many", 10, 0, 20),
               "last": module("last", 1, 0, 50)}
    assert simulate(["one", "many", "last"], modules) == 150
    modules["one"] = module("one", 3, 0, 100)  # the same 100 s in three tests: "many"'s worker takes "last"
    assert simulate(["one", "many", "last"], modules) == 100


def test_the_order_found_starts_the_long_waiting_module_beside_the_busy_ones(capsys):
    timed = [*module("hub", 4, 0, 120), *module("grade", 4, 120, 60), *module("lessons", 4, 60, 60)]
    modules = by_module(timed)
    found = order(timed, long_s=20, tries=200)
    assert found[-1] != "hub"  # started last, the hub's two minutes of waiting would end the run alone
    assert simulate(found, modules) < simulate(["grade", "lessons", "hub"], modules)
    assert "best found" in capsys.readouterr().out
