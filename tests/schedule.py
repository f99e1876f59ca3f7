"""The order in which the parallel run starts test modules.

`make test` hands out whole modules to the workers (`--dist loadfile --no-loadscope-reorder`), in collection
order, each worker taking the next module when it has two tests or fewer left. The suite is CPU-bound on the
project's 2-core machine except where the hub tests wait (for a time limit, a server, a batch): on
2026-11-26 the cores were idle for 160 s of a 782 s run, most of it while test_hub_autograde and
test_hub_end_to_end waited side by side. In this order (found by `benchmarks/suite_time.py order`, which
simulates the two workers on each test's CPU and wall time measured alone; then checked by a full run), the
hub modules, which mostly wait, mostly run on one worker beside the grading and notebook modules, which use
the cores, on the other; the long ones start early, the short ones fill in at the end.
"""

from collections.abc import Sequence

# Test modules in the order they start, with their CPU and wall seconds when run alone on the project's
# 2-core machine (2026-11-26); every other module follows them in collection order.
LONGEST_FIRST = (
    "test_hub_lti",  # CPU 46, wall 47
    "test_hub_autograde",  # CPU 119, wall 195
    "test_grading_nbgrader_compat",  # CPU 121, wall 81
    "test_lessons",  # CPU 48, wall 48
    "test_book",  # beside test_lessons: the two share one run of each lesson (executed_copy), from both ends
    "test_grading_honest_answers",  # CPU 85, wall 53
    "test_grading_tamper",  # CPU 45, wall 35
    "test_hub_server_limits",  # CPU 21, wall 25
    "test_hub_isolation",  # CPU 20, wall 31 (2026-11-28)
    "test_hub_hidden_tests",  # CPU 38, wall 35
    "test_grading_tamper_round2",  # CPU 25, wall 25
    "test_hub_end_to_end",  # CPU 63, wall 112
    "test_hub_browser_xss",  # CPU 43, wall 53
    "test_hub_browser",  # CPU 49, wall 45
    "test_browser",  # CPU 91, wall 75
    "test_grading_end_to_end",  # CPU 93, wall 96
    "test_hub_lti_browser",  # CPU 29, wall 28
    "test_colab",  # CPU 69, wall 71
    "test_validate",  # CPU 40, wall 51
    "test_hub_redteam",  # CPU 65, wall 67
    "test_grading_zygote",  # CPU 38, wall 40
    "test_grading_honest_corpus",  # CPU 19, wall 12
)


def module_of(nodeid: str) -> str:
    """Return the module name of a test id ("tests/test_x.py::test_y[z]" -> "test_x")."""
    return nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")


def longest_first(nodeids: Sequence[str]) -> list[int]:
    """Return the positions of `nodeids` in running order: LONGEST_FIRST's modules first, in its order, then
    the rest as collected; within a module the order is kept."""
    rank = {name: place for place, name in enumerate(LONGEST_FIRST)}
    return sorted(range(len(nodeids)), key=lambda i: rank.get(module_of(nodeids[i]), len(rank)))
