"""The order in which the parallel run starts test modules.

`make test` hands out whole modules to the workers (`--dist loadfile --no-loadscope-reorder`), in collection
order, each worker taking the next module when it has two tests or fewer left. The suite is CPU-bound on the
project's 2-core machine except where the hub tests wait (for a time limit, a server, a batch): on
2026-11-26 the cores were idle for 160 s of a 782 s run, most of it while test_hub_autograde and
test_hub_end_to_end waited side by side. In this order (the longest wall first, from a whole run measured
by `benchmarks/suite_time.py measure`; its `order` search needs each module measured alone), the hub
modules, which mostly wait, start early beside the grading and notebook modules, which use the cores; the
short ones fill in at the end.
"""

from collections.abc import Sequence

# Test modules in the order they start, longest first, with their CPU and wall seconds in a whole run on two
# workers on the project's 2-core machine (2026-12-03, `suite_time.py measure`; walls include the other
# worker's share of the cores). Modules that mostly wait (the real hubs) go first beside the ones that use the
# cores; every other module follows them in collection order. Before this order the hub modules ran last in
# collection order (tests/hub/ after tests/grading/), the PostgreSQL hub alone for its last 150 s.
LONGEST_FIRST = (
    "test_hub_postgres",  # CPU 96, wall 235
    "test_grading_honest_answers",  # CPU 202, wall 186
    "test_hub_end_to_end",  # CPU 58, wall 175
    "test_hub_autograde",  # CPU 97, wall 169
    "test_hub_nodes",  # CPU 92, wall 150
    "test_ps08_several_devices",  # CPU 108, wall 120
    "test_grading_nbgrader_compat",  # CPU 93, wall 101
    "test_colab",  # CPU 74, wall 94
    "test_hub_redteam",  # CPU 79, wall 94
    "test_grading_out_of_process_ps02_ps03",  # CPU 52, wall 92
    "test_grading_end_to_end",  # CPU 75, wall 84
    "test_hub_lti",  # CPU 75, wall 83
    "test_lessons",  # CPU 7, wall 7 (lessons run by test_book first are read back)
    "test_book",  # CPU 105, wall 74: beside test_lessons, both read one run of each lesson (executed_copy)
    "test_hub_http_workers",  # CPU 42, wall 65
    "test_hub_http_exchange",  # CPU 50, wall 64
    "test_browser",  # CPU 70, wall 59
    "test_hub_browser_xss",  # CPU 44, wall 57
    "test_validate",  # CPU 34, wall 49
    "test_ps06_streams_and_profiling",  # CPU 44, wall 47
    "test_grading_tamper",  # CPU 37, wall 45
    "test_ps02_moving_tensors",  # CPU 40, wall 43
    "test_grading_zygote",  # CPU 25, wall 42
    "test_hub_hidden_tests",  # CPU 34, wall 41
    "test_lesson08",  # CPU 38, wall 40
    "test_hub_browser",  # CPU 43, wall 39
    "test_hub_isolation",  # CPU 24, wall 37
    "test_hub_server_limits",  # CPU 18, wall 30
    "test_grading_tamper_round2",  # CPU 23, wall 28
    "test_hub_lti_browser",  # CPU 25, wall 27
    "test_grading_execution",  # CPU 2, wall 23
    "test_hub_nodes_network",  # CPU 1, wall 21
    "test_grading_solution_check",  # CPU 21, wall 21
    "test_ps03_device_mismatch",  # CPU 17, wall 20
)


def module_of(nodeid: str) -> str:
    """Return the module name of a test id ("tests/test_x.py::test_y[z]" -> "test_x")."""
    return nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")


def longest_first(nodeids: Sequence[str]) -> list[int]:
    """Return the positions of `nodeids` in running order: LONGEST_FIRST's modules first, in its order, then
    the rest as collected; within a module the order is kept."""
    rank = {name: place for place, name in enumerate(LONGEST_FIRST)}
    return sorted(range(len(nodeids)), key=lambda i: rank.get(module_of(nodeids[i]), len(rank)))
