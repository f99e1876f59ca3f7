"""Merging results into the course gradebook: once per student, updated in place, a person's grade respected.
"""

import pytest
from nbgrader.api import Gradebook, MissingEntry

from autograder.grading import gradebook
from autograder.grading.results import CellScore, StudentResult


def result(score: float, status: str = "graded") -> StudentResult:
    return StudentResult("ada", "tiny", status, cells=[CellScore("tiny.ipynb", "double-tests", score, 2.0)],
                         late_penalties={"tiny.ipynb": 0.5}, timestamp="2026-11-01T10:00:00")


def test_recording_twice_updates_the_one_submission(scratch_course):
    db = f"sqlite:///{scratch_course / 'gradebook.db'}"
    gradebook.generate(scratch_course, "tiny", scratch_course / "generated", db_url=db)
    gradebook.record(db, gradebook.course_id(scratch_course), "tiny", result(0.0))
    gradebook.record(db, gradebook.course_id(scratch_course), "tiny", result(2.0))
    with Gradebook(db) as gb:
        assert len(gb.find_assignment("tiny").submissions) == 1
        submission = gb.find_submission("tiny", "ada")
        assert submission.score == 2.0 and submission.late_submission_penalty == 0.5
        assert not submission.needs_manual_grade
    assert gradebook.has_submission(db, gradebook.course_id(scratch_course), "tiny", "ada")


def test_comments_are_recorded_and_a_cell_the_gradebook_lacks_is_refused(scratch_course):
    db = f"sqlite:///{scratch_course / 'gradebook.db'}"
    gradebook.generate(scratch_course, "tiny", scratch_course / "generated", db_url=db)
    said = result(2.0)
    said.comments = {"tiny.ipynb": {"double": "No response."}}
    gradebook.record(db, gradebook.course_id(scratch_course), "tiny", said)
    with Gradebook(db) as gb:
        assert gb.find_comment("double", "tiny", "tiny", "ada").auto_comment == "No response."
        assert gb.find_grade("double-tests", "tiny", "tiny", "ada").auto_score == 2.0
    unknown = result(1.0)
    unknown.cells = [CellScore("tiny.ipynb", "no-such-tests", 1.0, 1.0)]
    with pytest.raises(MissingEntry):
        gradebook.record(db, gradebook.course_id(scratch_course), "tiny", unknown)


def test_a_grade_a_person_gave_is_kept_and_flagged_for_review(scratch_course):
    db = f"sqlite:///{scratch_course / 'gradebook.db'}"
    gradebook.generate(scratch_course, "tiny", scratch_course / "generated", db_url=db)
    gradebook.record(db, gradebook.course_id(scratch_course), "tiny", result(0.0))
    with Gradebook(db) as gb:
        gb.find_grade("double-tests", "tiny", "tiny", "ada").manual_score = 1.0
        gb.db.commit()
    gradebook.record(db, gradebook.course_id(scratch_course), "tiny", result(2.0))
    with Gradebook(db) as gb:
        grade = gb.find_grade("double-tests", "tiny", "tiny", "ada")
        assert (grade.manual_score, grade.auto_score, grade.needs_manual_grade) == (1.0, 2.0, True)


def test_a_missing_student_is_known_but_has_no_submission(scratch_course):
    db = f"sqlite:///{scratch_course / 'gradebook.db'}"
    gradebook.generate(scratch_course, "tiny", scratch_course / "generated", db_url=db)
    gradebook.record(db, gradebook.course_id(scratch_course), "tiny", StudentResult("ben", "tiny", "missing"))
    with Gradebook(db) as gb:
        assert gb.find_student("ben").id == "ben"
    assert not gradebook.has_submission(db, gradebook.course_id(scratch_course), "tiny", "ben")


def _hold_lock(db_url: str, held, release) -> None:
    from autograder.grading.gradebook import locked

    with locked(db_url):
        held.set()
        release.wait(60)


def test_a_second_run_finds_the_gradebook_busy_until_the_first_lets_go(tmp_path):
    import multiprocessing

    from autograder.grading.errors import GradebookBusy
    from autograder.grading.gradebook import locked

    db_url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    context = multiprocessing.get_context("spawn")
    held, release = context.Event(), context.Event()
    first = context.Process(target=_hold_lock, args=(db_url, held, release))
    first.start()
    try:
        assert held.wait(60)
        with pytest.raises(GradebookBusy, match="another grading run"), locked(db_url):
            pass
    finally:
        release.set()
        first.join(60)
    with locked(db_url):  # free again once the first run has finished
        assert (tmp_path / "gradebook.db.lock").exists()


def test_gradebooks_share_an_engine_per_database_and_process_and_still_let_go_of_the_file(tmp_path,
                                                                                           monkeypatch):
    import os

    import nbgrader.api

    monkeypatch.setattr(nbgrader.api, "create_engine", nbgrader.api.create_engine)  # undone afterwards
    gradebook.share_engines()
    gradebook.share_engines()  # twice changes nothing
    first, other = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    with Gradebook(first) as gb:
        gb.update_or_create_student("ada")
        engine = gb.engine
    assert engine.pool.checkedout() == 0  # closed: no connection holds the file
    with Gradebook(first) as gb, Gradebook(other) as elsewhere:
        assert gb.engine is engine and elsewhere.engine is not engine
        assert [s.id for s in gb.students] == ["ada"] and elsewhere.students == []
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a forked worker gets an engine of its own, never its parent's
        with Gradebook(first) as gb:
            os.write(write, b"own" if gb.engine is not engine and gb.students else b"parent's")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 16) == b"own"


def test_the_process_apart_ends_quietly_under_the_graders_signal_handlers():
    """`python -m autograder grade` turns SIGTERM into KeyboardInterrupt (an interrupted run saves what it
    graded). The process that makes the template apart must not inherit that: the pool ends it with SIGTERM,
    and it printed "Process ForkPoolWorker-1 ... KeyboardInterrupt" before grading began (one run in four to
    three in four, by when the signal found it). Ctrl-C (SIGINT, to the whole terminal) is the grader's."""
    import signal

    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)  # as autograder.__main__ sets it
    try:
        assert gradebook.run_apart(signal.getsignal, signal.SIGTERM) == signal.SIG_DFL
        assert gradebook.run_apart(signal.getsignal, signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, previous)
