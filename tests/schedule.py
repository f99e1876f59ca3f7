"""The order in which the parallel run starts test modules: the longest first.

`make test` hands out whole modules to the workers (`--dist loadfile --no-loadscope-reorder`), in collection
order, each worker taking the next module when it finishes one. Started last, a long module runs alone while
the other worker idles: on 2026-11-26 one worker finished at 630 s and the other ran on to 972 s, the
machine half idle, with the two longest hub tests. Started first, the long modules overlap each other and the
short ones fill in at the end (longest processing time first).
"""

from collections.abc import Sequence

# Test modules by their time in a full parallel run on the project's 2-core machine (2026-11-26), longest
# first; every other module follows them in collection order.
LONGEST_FIRST = (
    "test_hub_autograde",  # 198 s
    "test_grading_nbgrader_compat",  # 198 s
    "test_grading_honest_answers",  # 140 s
    "test_hub_redteam",  # 118 s
    "test_hub_end_to_end",  # 113 s
    "test_grading_end_to_end",  # 110 s
    "test_lessons",  # 99 s
    "test_colab",  # 87 s
    "test_hub_lti",  # 71 s
    "test_browser",  # 70 s
    "test_hub_browser_xss",  # 58 s
    "test_validate",  # 48 s
    "test_grading_tamper",  # 43 s
    "test_hub_hidden_tests",  # 43 s
    "test_grading_zygote",  # 41 s
    "test_hub_server_limits",  # 37 s
    "test_hub_lti_browser",  # 30 s
    "test_grading_tamper_round2",  # 28 s
    "test_hub_browser",  # 25 s
    "test_grading_honest_corpus",  # 22 s
)


def module_of(nodeid: str) -> str:
    """Return the module name of a test id ("tests/test_x.py::test_y[z]" -> "test_x")."""
    return nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")


def longest_first(nodeids: Sequence[str]) -> list[int]:
    """Return the positions of `nodeids` in running order: LONGEST_FIRST's modules first, in its order, then
    the rest as collected; within a module the order is kept."""
    rank = {name: place for place, name in enumerate(LONGEST_FIRST)}
    return sorted(range(len(nodeids)), key=lambda i: rank.get(module_of(nodeids[i]), len(rank)))
