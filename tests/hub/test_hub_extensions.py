"""Per-student extensions (`hub extend`), kept where nbgrader keeps them: on the student's submission in the
gradebook, counted from the assignment's due date, replaced (not stacked) by the next one."""

import datetime

import pytest
from nbgrader.api import Gradebook

from autograder.grading.gradebook import ensure_schema, extensions, has_submission
from autograder.hub.due_dates import ExtensionError, extend, listed, main

COURSE_ID = "device-lab"
DUE = datetime.datetime(2026, 12, 1, 17, 0, 0)


@pytest.fixture
def db_url(tmp_path):
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    ensure_schema(url)
    with Gradebook(url, COURSE_ID) as gb:
        gb.update_or_create_assignment("ps01", duedate=DUE)
        gb.update_or_create_assignment("ps02")  # no due date
        for student in ("ann", "bob"):
            gb.update_or_create_student(student)
    return url


def test_an_extension_by_hours_moves_the_student_s_own_due_date(db_url):
    found = extend(db_url, COURSE_ID, "ps01", "ann", hours=48)
    assert found.hours == 48 and found.due == "2026-12-01 17:00:00"
    assert found.extended_due == "2026-12-03 17:00:00"
    with Gradebook(db_url, COURSE_ID) as gb:
        submission = gb.find_submission("ps01", "ann")
        assert submission.duedate == DUE + datetime.timedelta(hours=48)  # nbgrader's own reading of it
    assert extensions(db_url, COURSE_ID, "ps01") == {"ann": 48 * 3600}
    assert "48 h" in found.line() and "2026-12-03 17:00:00 UTC" in found.line()


def test_an_extension_until_a_date_counts_from_the_due_date_and_replaces_the_last(db_url):
    extend(db_url, COURSE_ID, "ps01", "bob", hours=5)
    found = extend(db_url, COURSE_ID, "ps01", "bob", until="2026-12-02 05:00:00 UTC")
    assert found.hours == 12
    assert [(e.student, e.hours) for e in listed(db_url, COURSE_ID, "ps01")] == [("bob", 12)]


def test_taking_it_back_leaves_no_extension_and_no_submission(db_url):
    extend(db_url, COURSE_ID, "ps01", "ann", hours=3)
    found = extend(db_url, COURSE_ID, "ps01", "ann")
    assert found.hours == 0 and "no extension" in found.line()
    assert extensions(db_url, COURSE_ID, "ps01") == {}
    assert not has_submission(db_url, COURSE_ID, "ps01", "ann"), "a row made for an extension: no submission"


@pytest.mark.parametrize(("assignment", "student", "kwargs", "said"), [
    ("ps01", "zed", {"hours": 2}, "no student 'zed'"),
    ("ps02", "ann", {"until": "2026-12-05 00:00:00"}, "has no due date"),
    ("ps01", "ann", {"until": "2026-11-30 00:00:00"}, "not after the due date"),
    ("ps01", "ann", {"until": "next tuesday"}, "not a date"),
    ("ps01", "ann", {"hours": -1}, "above 0"),
])
def test_what_cannot_be_given_is_refused_with_the_reason(db_url, assignment, student, kwargs, said):
    with pytest.raises(ExtensionError, match=said):
        extend(db_url, COURSE_ID, assignment, student, **kwargs)
    assert extensions(db_url, COURSE_ID, assignment) == {}


def test_the_command_the_hub_runs_as_the_grader_prints_json(db_url, capsys, tmp_path):
    """Giving one through the command needs a course (it defines the assignment first): the hub tests and
    test_hub_autograde do that; here its refusals and its listing."""
    import json

    extend(db_url, COURSE_ID, "ps01", "ann", hours=24)
    main(["ps01", "zed", "--by", "24", "--course", str(tmp_path), "--course-id", COURSE_ID])
    assert "no student" in json.loads(capsys.readouterr().out)["error"]
    main(["ps01", "--course", str(tmp_path), "--course-id", COURSE_ID])
    assert [(e["student"], e["extended_due"]) for e in json.loads(capsys.readouterr().out)] == [
        ("ann", "2026-12-02 17:00:00")]


def test_hidden_tests_stay_hidden_until_the_student_s_own_due_date(db_url, tmp_path):
    """The autograde service protects hidden tests until the due date: with an extension, until theirs."""
    from autograder.grading.redact import due_date

    extend(db_url, COURSE_ID, "ps01", "ann", hours=48)
    assert due_date(tmp_path, "ps01") == DUE
    assert due_date(tmp_path, "ps01", "ann") == DUE + datetime.timedelta(hours=48)
    assert due_date(tmp_path, "ps01", "bob") == DUE, "no extension: the class's due date"
    assert due_date(tmp_path, "ps02", "ann") is None


def test_a_name_that_looks_like_an_option_is_a_name_after_the_separator(db_url, capsys, tmp_path):
    """The hub passes ids after `--` (loop._extensions_as_grader): `-h` is a student to look up, not help."""
    import json

    main(["--course", str(tmp_path), "--course-id", COURSE_ID, "--by", "2", "--", "ps01", "-h"])
    assert "no student '-h'" in json.loads(capsys.readouterr().out)["error"]
