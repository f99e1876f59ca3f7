"""How a student's grading attempts become one row: status, score and a detail a person can read."""

from autograder.grading.session import combine, describe_failure, next_skip

POINTS = {("tiny.ipynb", "double-tests"): 2.0, ("tiny.ipynb", "square-tests"): 1.0}


def completed(double=2.0, square=1.0, events=(), notes=()):
    cells = [{"notebook": "tiny.ipynb", "grade_id": "double-tests", "score": double, "max_score": 2.0,
              "needs_manual_grade": False, "error": ""},
             {"notebook": "tiny.ipynb", "grade_id": "square-tests", "score": square, "max_score": 1.0,
              "needs_manual_grade": False, "error": ""}]
    return {"outcome": "completed", "cells": cells, "events": list(events), "notes": list(notes),
            "comments": {}, "late_penalties": {}, "timestamp": None, "failure": None}


def failed(kind, cell=2, grade_id=None, message="the kernel died (SIGSEGV)"):
    return {"outcome": "failed", "events": [], "notes": [],
            "failure": {"kind": kind, "notebook": "tiny", "cell": cell, "grade_id": grade_id, "message": message}}


def test_a_clean_run_is_graded_with_an_empty_detail():
    result = combine("ada", "tiny", [completed()], [], POINTS, multi=False)
    assert (result.status, result.score, result.max_score, result.detail) == ("graded", 3, 3, "")


def test_failed_tests_are_listed():
    result = combine("ada", "tiny", [completed(double=0)], ["graded 'x.ipynb' as tiny.ipynb"], POINTS, False)
    assert result.detail == "failed 1 of 2 tests: double-tests; graded 'x.ipynb' as tiny.ipynb"


def test_a_crash_then_a_clean_second_attempt_is_crashed_with_the_scores_of_the_second():
    result = combine("ada", "tiny", [failed("kernel-died"), completed(square=0)], [], POINTS, False)
    assert (result.status, result.score) == ("crashed", 2)
    assert result.detail.startswith("cell 3: the kernel died (SIGSEGV); graded again without running that cell")


def test_a_hung_cell_is_a_timeout_named_by_its_test():
    result = combine("ada", "tiny", [failed("unresponsive", 4, "square-tests"), completed(square=0)], [],
                     POINTS, False)
    assert result.status == "timeout"
    assert result.detail.startswith("cell 5 (square-tests): ran past the time limit and ignored the interrupt")


def test_without_a_finished_attempt_every_test_scores_zero():
    result = combine("ada", "tiny", [failed("memory", None, message="used more than the 600 MB memory cap")], [],
                     POINTS, False)
    assert (result.status, result.score, result.max_score, result.ran) == ("memory", 0, 3, False)
    assert result.detail == "before the first cell ran: used more than the 600 MB memory cap"


def test_events_inside_a_finished_run_set_the_status_once_and_explain_themselves():
    events = [{"kind": "memory", "notebook": "tiny", "cell": 2, "grade_id": None, "message": "MemoryError"},
              {"kind": "memory", "notebook": "tiny", "cell": 2, "grade_id": None, "message": "MemoryError"},
              {"kind": "sys-exit", "notebook": "tiny", "cell": 3, "grade_id": None, "message": "called sys.exit()"}]
    result = combine("ada", "tiny", [completed(events=events)], [], POINTS, False)
    assert result.status == "memory"
    assert result.detail == "cell 3: ran out of memory (MemoryError); cell 4: called sys.exit()"


def test_notebook_names_appear_only_for_assignments_with_several_notebooks():
    failure = {"kind": "kernel-died", "notebook": "part2", "cell": 0, "grade_id": "a-tests", "message": "died"}
    assert describe_failure(failure, multi=True) == "cell 1 (a-tests) of part2: died"
    assert describe_failure(failure, multi=False) == "cell 1 (a-tests): died"


def test_a_cell_blamed_after_the_real_culprit_runs_again():
    skip = [["tiny", 4, "not run"], ["other", 9, "not run"]]
    keep, cleared = next_skip(skip, {"notebook": "tiny", "cell": 2})
    assert keep == [["other", 9, "not run"]] and cleared == {("tiny", 4)}


def test_the_detail_counts_tests_only_and_says_what_awaits_a_person():
    report = completed(double=0)
    report["cells"] += [{"notebook": "tiny.ipynb", "grade_id": "essay", "score": 0.0, "max_score": 3.0,
                         "needs_manual_grade": True, "error": "", "kind": "answer"},
                        {"notebook": "tiny.ipynb", "grade_id": "plot-task", "score": 0.0, "max_score": 2.0,
                         "needs_manual_grade": True, "error": "", "kind": "task"}]
    result = combine("ada", "tiny", [report], [], POINTS, multi=False)
    assert result.detail == "failed 1 of 2 tests: double-tests; 2 cells await manual grading: essay, plot-task"
