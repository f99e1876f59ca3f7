"""How a student's grading attempts become one row: status, score and a detail a person can read."""

import pytest

from autograder.grading.attempt import (
    AttemptReport,
    Failure,
    FailureKind,
    Job,
    Skip,
    next_attempt,
    wrongly_blamed,
)
from autograder.grading.errors import SandboxError
from autograder.grading.results import CellScore
from autograder.grading.sandbox import IsolationUnavailable
from autograder.grading.session import combine, describe_failure

POINTS = {("tiny.ipynb", "double-tests"): 2.0, ("tiny.ipynb", "square-tests"): 1.0}


def completed(double=2.0, square=1.0, events=(), notes=()):
    cells = [{"notebook": "tiny.ipynb", "grade_id": "double-tests", "score": double, "max_score": 2.0,
              "needs_manual_grade": False, "error": ""},
             {"notebook": "tiny.ipynb", "grade_id": "square-tests", "score": square, "max_score": 1.0,
              "needs_manual_grade": False, "error": ""}]
    return AttemptReport.from_json({"outcome": "completed", "cells": cells, "events": list(events),
                                    "notes": list(notes), "comments": {}, "late_penalties": {},
                                    "timestamp": None, "failure": None})


def failed(kind, cell=2, grade_id=None, message="the kernel died (SIGSEGV)"):
    return AttemptReport("failed", Failure(FailureKind(kind), message, "tiny", cell, grade_id))


def test_a_clean_run_is_graded_with_an_empty_detail():
    result = combine("ada", "tiny", [completed()], [], POINTS, multi=False)
    assert (result.status, result.score, result.max_score, result.detail) == ("graded", 3, 3, "")


def test_failed_tests_are_listed():
    result = combine("ada", "tiny", [completed(double=0)], ["graded 'x.ipynb' as tiny.ipynb"], POINTS, False)
    assert result.detail == "failed 1 of 2 tests: double-tests; graded 'x.ipynb' as tiny.ipynb"


def test_a_crash_then_a_clean_second_attempt_is_crashed_with_the_scores_of_the_second():
    result = combine("ada", "tiny", [failed("kernel-died"), completed(square=0)], [], POINTS, False)
    assert (result.status, result.score) == ("crashed", 2)
    assert result.detail.startswith("cell 3: the kernel died (SIGSEGV); graded again without running that "
                                    "cell")


def test_a_hung_cell_is_a_timeout_named_by_its_test():
    result = combine("ada", "tiny", [failed("unresponsive", 4, "square-tests"), completed(square=0)], [],
                     POINTS, False)
    assert result.status == "timeout"
    assert result.detail.startswith(
        "cell 5 (square-tests): ran past the time limit and ignored the interrupt")


def test_without_a_finished_attempt_every_test_scores_zero():
    result = combine("ada", "tiny", [failed("memory", None, message="used more than the 600 MiB memory cap")],
                     [], POINTS, False)
    assert (result.status, result.score, result.max_score, result.ran) == ("memory", 0, 3, False)
    assert result.detail == "before the first cell ran: used more than the 600 MiB memory cap"


def test_events_inside_a_finished_run_set_the_status_once_and_explain_themselves():
    events = [{"kind": "memory", "notebook": "tiny", "cell": 2, "grade_id": None, "message": "MemoryError"},
              {"kind": "memory", "notebook": "tiny", "cell": 2, "grade_id": None, "message": "MemoryError"},
              {"kind": "sys-exit", "notebook": "tiny", "cell": 3, "grade_id": None,
               "message": "called sys.exit()"}]
    result = combine("ada", "tiny", [completed(events=events)], [], POINTS, False)
    assert result.status == "memory"
    assert result.detail == "cell 3: ran out of memory (MemoryError); cell 4: called sys.exit()"


def test_notebook_names_appear_only_for_assignments_with_several_notebooks():
    failure = Failure(FailureKind.KERNEL_DIED, "died", "part2", 0, "a-tests")
    assert describe_failure(failure, multi=True) == "cell 1 (a-tests) of part2: died"
    assert describe_failure(failure, multi=False) == "cell 1 (a-tests): died"


def test_a_cell_blamed_after_the_real_culprit_runs_again():
    job = Job(0, "ada", {}, attempt=2, skip=(Skip("tiny", 4, "not run"), Skip("other", 9, "not run")))
    retry = next_attempt(job, failed("kernel-died", cell=2))
    assert [(s.notebook, s.cell) for s in retry.skip] == [("other", 9), ("tiny", 2)]
    assert retry.skip[-1].why == "not run: in an earlier attempt this cell crashed the kernel"
    assert wrongly_blamed(job, retry) == {("tiny", 4)} and retry.scratch_name == "0-3"


def test_the_next_attempt_skips_the_guilty_cell_until_the_attempts_run_out():
    job = Job(3, "ada", {"tiny.ipynb": "/x/tiny.ipynb"})
    second = next_attempt(job, failed("memory", cell=5))
    assert (second.attempt, second.skip[0].cell, second.notebooks) == (2, 5, job.notebooks)
    assert next_attempt(second, failed("memory", cell=5)) is None  # the same cell again: stop
    assert next_attempt(Job(3, "ada", {}, attempt=3), failed("memory", cell=1)) is None
    assert next_attempt(job, failed("invalid", cell=1)) is None and next_attempt(job, completed()) is None
    assert next_attempt(job, failed("kernel-died", cell=None)) is None  # no cell to blame
    assert Job.from_json(second.to_json()) == second


def test_reports_cross_the_pipe_unchanged():
    report = completed(double=1, events=[{"kind": "tamper", "notebook": "tiny", "cell": 1, "message": "m"}])
    report.failure = Failure(FailureKind.DISK, "wrote too much", "tiny", 4, "x")
    assert AttemptReport.from_json(report.to_json()) == report
    assert FailureKind.UNRESPONSIVE.status == "timeout" and not FailureKind.GRADER_ERROR.retried


def test_the_detail_counts_tests_only_and_says_what_awaits_a_person():
    report = completed(double=0)
    report.cells += [CellScore("tiny.ipynb", "essay", 0.0, 3.0, True, "", "answer"),
                     CellScore("tiny.ipynb", "plot-task", 0.0, 2.0, True, "", "task")]
    result = combine("ada", "tiny", [report], [], POINTS, multi=False)
    assert result.detail == ("failed 1 of 2 tests: double-tests; 2 cells await manual grading: essay, "
                             "plot-task")


def test_grade_hide_reaches_the_sandbox_as_more_hidden_folders(monkeypatch, tmp_path):
    from autograder import __main__ as cli
    from autograder.grading import session

    seen = {}

    def fake_grade_class(root, assignment, submissions, options, **where):
        seen["options"] = options
        raise session.GradingError("stop here")

    monkeypatch.setattr(session, "grade_class", fake_grade_class)
    exchange = tmp_path / "exchange"
    assert cli.main(["grade", "tiny", str(tmp_path), "--hide", str(exchange), "--hide", "/srv/other"]) != 0
    assert seen["options"].hidden == (exchange, session.Path("/srv/other"))

    def fake_detect(mode, hidden, visible):
        seen["hidden"] = hidden
        raise IsolationUnavailable("stop here too")

    monkeypatch.setattr(session, "detect_isolation", fake_detect)
    with pytest.raises(SandboxError):
        session.isolate("auto", [tmp_path / "course", *seen["options"].hidden], print)
    assert seen["hidden"] == [tmp_path / "course", exchange, session.Path("/srv/other")]
