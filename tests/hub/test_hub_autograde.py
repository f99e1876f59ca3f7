"""Autograde on submit: the queue's rules (no root needed), then the service on a real hub, end to end.

On the hub (DEVICELAB_HUB_TESTS=1, root; under CI=true a skip is a failure): the instructor releases and turns
autograding on; three students (right, wrong, hostile) submit through their own servers and, with no
instructor action, each fetches graded feedback with the grader's score, which the gradebook (`hub export`)
holds too. A resubmission replaces the grade. Then the service is killed (SIGKILL) in the middle of a batch,
after some of it was recorded: the hub restarts it and every submission is graded exactly once.
"""

import csv
import datetime
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from autograder import COURSE_ROOT
from autograder.course import with_venv_on_path
from autograder.hub.exchange.arrival import nbgrader_time
from autograder.hub.exchange.folder.autograde import FolderAutograde
from autograder.hub.service.autograde_queue import MAX_TRIES, Queue, State
from autograder.hub.setup.hub_api import HubAPI
from tests.clock import ManualClock
from tests.hub.test_hub_end_to_end import SCORE, refused
from tests.hub_support import (
    COURSE,
    Hub,
    answers,
    class_hub,
    exported,
    hand_in,
    hub_tests_or_skip,
    smallest_assignment,
    start_server,
    submissions_of,
)

ROSTER = ("id,name,role\nann,Ann Right,student\nbob,Bob Wrong,student\ncat,Cat Hostile,student\n"
          "ivy,Ivy Teacher,instructor\n")


# The queue, without a hub

@pytest.fixture
def queue(tmp_path: Path) -> Queue:
    q = Queue(tmp_path / "queue.sqlite", clock=ManualClock())
    q.configure("ps01", True)
    return q


def at(q: Queue, now: float) -> Queue:
    """Return the queue with its clock moved to `now`."""
    q.clock.set(now)
    return q


def add(q: Queue, student: str, stamp: str, now: float, assignment: str = "ps01") -> str:
    """Queue a submission of the student's at time `now`."""
    return at(q, now).add(student, assignment, stamp, f"{student}+{assignment}+{stamp}+x", "secret")


def test_newest_submission_wins_and_keeps_its_place(queue: Queue) -> None:
    assert add(queue, "ann", "t1", now=1) == State.QUEUED
    assert add(queue, "bob", "t2", now=2) == State.QUEUED
    # replaces t1, at t1's place (before bob), not an extra one
    assert add(queue, "ann", "t3", now=3) == State.QUEUED
    assert add(queue, "ann", "t3", now=4) == State.QUEUED  # seen again: nothing changes
    assert add(queue, "ann", "t0", now=5) == State.SUPERSEDED  # an older one found late never counts
    states = {(e.student, e.timestamp): e.state for e in queue.entries()}
    assert states == {("ann", "t1"): State.SUPERSEDED, ("bob", "t2"): State.QUEUED,
                      ("ann", "t3"): State.QUEUED, ("ann", "t0"): State.SUPERSEDED}
    assert [(e.student, e.timestamp) for e in at(queue, 6).next_batch(8)] == [("ann", "t3"), ("bob", "t2")]


def test_a_batch_is_fair_and_bounded(queue: Queue) -> None:
    for i in range(20):  # a whole class at once
        add(queue, f"s{i:02}", "t1", now=i)
    add(queue, "late", "t1", now=100)
    first = at(queue, 101).next_batch(8)
    assert [e.student for e in first] == [f"s{i:02}" for i in range(8)]
    assert ({e.state for e in queue.entries(state=State.GRADING)} == {State.GRADING}
            and len(queue.entries(state=State.GRADING)) == 8)
    for e in first:
        at(queue, 102).record_outcome(e, graded=True, status="graded", score=1, max_score=1, detail="")
    # The one who came late waits for those ahead of them only, never behind a later crowd:
    for i in range(20, 40):
        add(queue, f"s{i:02}", "t1", now=103)
    order = [e.student for b in iter(lambda: at(queue, 104).next_batch(8), []) for e in b]
    assert order.index("late") == 12 and order[:12] == [f"s{i:02}" for i in range(8, 20)]


def test_a_running_batch_takes_late_submissions_only_in_its_assignment_s_turn(queue: Queue) -> None:
    queue.configure("ps02", True)
    for i in range(3):
        add(queue, f"s{i}", "t1", now=i)
    running = at(queue, 3).next_batch(2)
    assert [e.student for e in running] == ["s0", "s1"]
    add(queue, "s0", "t2", now=4)  # s0 again, while their first submission is graded: not in the same run
    add(queue, "s3", "t1", now=5)
    grading = frozenset(e.student for e in running)
    joined = at(queue, 6).next_batch(8, joining="ps01", grading=grading)
    assert [e.student for e in joined] == ["s2", "s3"]
    assert {e.student for e in queue.entries(state=State.GRADING)} == {"s0", "s1", "s2", "s3"}
    add(queue, "ann", "t1", now=7, assignment="ps02")  # ps02's turn comes before the next of ps01
    add(queue, "s4", "t1", now=8)
    grading |= {e.student for e in joined}
    # s0's resubmission waits for a run of its own, and does not hold ann's turn for the next of ps01
    assert at(queue, 9).next_batch(8, joining="ps01", grading=grading) == []
    for e in queue.entries(state=State.GRADING):
        at(queue, 10).record_outcome(e, graded=True, status="graded", score=1, max_score=1, detail="")
    assert [e.student for e in at(queue, 11).next_batch(8)] == ["s0", "s4"]  # the next run: s0 came first
    add(queue, "s5", "t1", now=12)
    assert at(queue, 12).next_batch(8, joining="ps01", grading=frozenset({"s0", "s4"})) == []  # ann's turn
    assert [e.assignment for e in at(queue, 13).next_batch(8)] == ["ps02"]


def test_the_joiner_stages_late_submissions_up_to_its_limit_and_fails_or_requeues_the_rest(
        queue: Queue, tmp_path: Path, monkeypatch) -> None:
    from autograder.hub.service import autograde as service

    for i, student in enumerate(["ann", "bob", "cat", "dan", "eve"]):
        add(queue, student, "t1", now=i)
    running = at(queue, 5).next_batch(1)  # ann's batch is being graded
    staged = service.Staged(tmp_path / "work")
    releaser = service.BatchReleaser(None, queue, running, staged)
    refuse, broken = {"bob"}, set()

    def stage_into(place, entries, into):
        for e in entries:
            (into.work / e.student).mkdir(parents=True)  # as the service's does: fails if it is there
            if e.student in broken:
                raise OSError("disk full")
            if e.student in refuse:
                into.refused[e.student] = "a link in it"
            else:
                (into.work / e.student / e.assignment).mkdir()

    monkeypatch.setattr(service, "stage_into", stage_into)
    monkeypatch.setattr(service, "scan", lambda place, q: 0)
    poll = ManualClock(1000.0)
    joiner = service.Joiner(None, queue, "ps01", releaser, staged, limit=3, poll_clock=poll)
    assert joiner() == ["cat", "dan"]  # bob's copy was refused: failed, with the reason
    states = {e.student: (e.state, e.status) for e in queue.entries()}
    assert states["bob"] == (State.FAILED, "refused")
    assert states["cat"][0] == states["dan"][0] == State.GRADING
    assert set(releaser.pending) == {"ann", "cat", "dan"} and joiner.joined == 2
    poll.advance(service.POLL_S / 2)
    assert joiner() == []  # asked again within the poll interval: eve waits for the next poll
    broken.add("eve")
    poll.advance(service.POLL_S / 2)
    assert joiner() == []  # staging failed: back in the queue, for this batch's next poll or the next batch
    assert {e.student: e.state for e in queue.entries()}["eve"] == State.QUEUED
    broken.clear()
    poll.advance(service.POLL_S)
    assert joiner() == ["eve"] and joiner.joined == 3  # refused ones do not count towards the limit
    add(queue, "fay", "t1", now=9)
    poll.advance(service.POLL_S)
    assert joiner() == [] and {e.student: e.state for e in queue.entries()}["fay"] == State.QUEUED  # limit


def test_turning_autograding_on_makes_the_template_before_the_first_submission(tmp_path: Path,
                                                                               caplog) -> None:
    from autograder.grading import gradebook
    from autograder.grading.template import CACHE_FOLDER
    from autograder.hub.service import autograde as service
    from tests.grading.test_grading_end_to_end import make_course

    course = make_course(tmp_path)
    place = service.Place(course, FolderAutograde.at(tmp_path / "exchange", "course101"))
    caplog.set_level("INFO", logger="devicelab.autograde")
    with gradebook.locked(gradebook.course_db_url(course)):  # the instructor's `hub grade` holds it
        service.prepare_ahead(place, "tiny")
    assert "the template is left to its first batch" in caplog.text
    assert not (place.graded("tiny") / CACHE_FOLDER).exists()
    service.prepare_ahead(place, "tiny")
    assert [p for p in (place.graded("tiny") / CACHE_FOLDER).iterdir() if p.is_dir()]  # made, for the batch
    with Gradebook(gradebook.course_db_url(course), gradebook.course_id(course)) as gb:
        assert [a.name for a in gb.assignments] == ["tiny"]  # and the assignment defined, as a batch does
    service.prepare_ahead(place, "nope")  # no such assignment: logged, left to a batch (which reports it)
    assert "nope: making the template ahead failed" in caplog.text


def test_one_assignment_per_batch_and_only_enabled_ones(queue: Queue) -> None:
    add(queue, "ann", "t1", now=1, assignment="ps02")  # not turned on: waits
    add(queue, "ann", "t2", now=2)
    assert [e.assignment for e in at(queue, 3).next_batch(8)] == ["ps01"]
    assert at(queue, 3).next_batch(8) == []
    queue.configure("ps02", True)
    assert [e.assignment for e in at(queue, 4).next_batch(8)] == ["ps02"]
    queue.configure("ps02", False)
    assert not queue.setting("ps02").enabled and queue.setting("ps02").timeout == 120


def test_a_restart_requeues_what_was_being_graded_and_fails_a_poison_pill(queue: Queue) -> None:
    add(queue, "ann", "t1", now=1)
    add(queue, "cat", "t1", now=2)
    for attempt in range(1, MAX_TRIES + 1):
        batch = at(queue, 10 * attempt).next_batch(8)
        assert {e.student for e in batch} == {"ann", "cat"}, attempt
        if attempt < MAX_TRIES:
            at(queue, 10 * attempt + 5).recover()  # the service was killed in the middle of the batch
        else:
            at(queue, 10 * attempt + 1).record_outcome(batch[0], graded=True, status="graded", score=1,
                                                       max_score=1, detail="")
            at(queue, 10 * attempt + 2).recover()
    states = {e.student: (e.state, e.tries) for e in queue.entries()}
    assert states == {"ann": (State.DONE, MAX_TRIES), "cat": (State.FAILED, MAX_TRIES)}
    assert "stopped 3 times" in queue.entries(state=State.FAILED)[0].detail


def test_an_hourly_limit_delays_and_never_drops(queue: Queue) -> None:
    queue.configure("ps01", True, per_hour=2)
    for n, now in enumerate((0, 10)):
        add(queue, "ann", f"t{n}", now=now)
        (e,) = at(queue, now + 1).next_batch(8)
        at(queue, now + 2).record_outcome(e, graded=True, status="graded", score=1, max_score=1, detail="")
    add(queue, "ann", "t2", now=20)
    add(queue, "bob", "t0", now=21)
    # ann waits; bob does not wait behind her
    assert [e.student for e in at(queue, 22).next_batch(8)] == ["bob"]
    assert at(queue, 3601).next_batch(8) == []  # her first was recorded at 2: a second short of the hour
    assert [e.timestamp for e in at(queue, 3602).next_batch(8)] == ["t2"]  # an hour after her first one


@pytest.mark.parametrize("timeout", [0, -5, 24 * 3600 + 1])
def test_a_time_limit_the_workers_would_refuse_is_refused_when_it_is_set(tmp_path: Path, timeout: float,
                                                                         capsys) -> None:
    """One bound for a time limit per notebook (grading/defaults.py): the queue refuses what a grading
    worker's handout would refuse later (where it was only a log line, and nothing was ever graded)."""
    from autograder.hub.exchange.http.work import Handout
    from autograder.hub.service import autograde as service

    with pytest.raises(ValueError, match="at most 86400 s"):
        Queue(tmp_path / "queue.sqlite").configure("ps01", True, timeout=timeout)
    with pytest.raises(ValueError, match="timeout is a number of seconds"):
        Handout.from_json({"assignment_id": "ps01", "student_id": "ann", "timestamp": "t",
                           "timeout": timeout})
    assert service.main(["on", "--course", str(tmp_path), "ps01", "--timeout", str(timeout)]) == 2
    assert "at most 86400 s" in capsys.readouterr().err


def test_the_queue_survives_a_reopen(tmp_path: Path) -> None:
    q = Queue(tmp_path / "queue.sqlite", clock=ManualClock())
    q.configure("ps01", True, per_hour=3, timeout=30)
    add(q, "ann", "t1", now=1)
    q.close()
    again = Queue(tmp_path / "queue.sqlite")
    assert again.setting("ps01").per_hour == 3 and again.setting("ps01").timeout == 30
    assert [e.state for e in again.entries()] == [State.QUEUED]


def test_scan_takes_only_submissions_their_student_owns_and_feedback_goes_back_by_secret(
        tmp_path: Path) -> None:
    import pwd

    from nbgrader.utils import notebook_hash

    from autograder.hub.service.autograde import Place, release_feedback, scan

    me = pwd.getpwuid(os.getuid()).pw_name
    place = Place(tmp_path / "course", FolderAutograde.at(tmp_path / "exchange", COURSE))
    queue = place.queue()
    queue.configure("ps01", True)
    for name in (f"{me}+ps01+2026-01-01 10:00:00.000001 UTC+a",
                 "someone-else+ps01+2026-01-01 10:00:01 UTC+b",  # another student's name
                 f"{me}+ps02+2026-01-01 10:00:02 UTC+c"):  # an assignment not turned on
        folder = place.exchange.folders.inbound / name
        folder.mkdir(parents=True)
        (folder / "submission_secret.txt").write_text("s3cret\n")
    assert scan(place, queue) == 1 and scan(place, queue) == 0
    (entry,) = queue.entries()
    assert (entry.student, entry.assignment, entry.secret) == (me, "ps01", "s3cret")
    release_feedback(place, entry, {"ps01": "<h4>ps01 (Score: 1.0 / 2.0)</h4>"})
    page = place.exchange.folders.feedback / f"{notebook_hash(secret='s3cret', notebook_id='ps01')}.html"
    assert page.read_text().startswith("<h4>") and page.stat().st_mode & 0o777 == 0o644
    assert place.exchange.folders.feedback.stat().st_mode & 0o777 == 0o711  # students may not list it
    assert (place.course / "feedback" / me / "ps01" / "timestamp.txt").read_text() == entry.timestamp


def test_scan_waits_for_nbgrader_to_finish_copying_a_submission(tmp_path: Path) -> None:
    """nbgrader's submit copies in place and writes the secret last: a folder without one is still being
    copied, so the service (polling every 0.25 s) waits for it; one that never gets one is taken after the
    grace, as before."""
    import pwd

    from autograder.hub.exchange.folder.autograde import COPYING_GRACE_S
    from autograder.hub.service.autograde import Place, scan

    me = pwd.getpwuid(os.getuid()).pw_name
    place = Place(tmp_path / "course", FolderAutograde.at(tmp_path / "exchange", COURSE))
    queue = place.queue()
    queue.configure("ps01", True)
    copying = place.exchange.folders.inbound / f"{me}+ps01+2026-01-01 10:00:00.000001 UTC+a"
    copying.mkdir(parents=True)
    (copying / "ps01.ipynb").write_text("{}")  # half a submission: no timestamp, no secret yet
    assert scan(place, queue) == 0 and not queue.entries()
    (copying / "timestamp.txt").write_text("2026-01-01 10:00:00.000001 UTC")
    (copying / "submission_secret.txt").write_text("")  # opened, not yet written
    assert scan(place, queue) == 0
    (copying / "submission_secret.txt").write_text("s3cret")
    assert scan(place, queue) == 1 and queue.entries()[0].secret == "s3cret"

    stuck = place.exchange.folders.inbound / f"{me}+ps01+2026-01-01 11:00:00.000001 UTC+b"
    stuck.mkdir()
    (stuck / "ps01.ipynb").write_text("{}")
    assert scan(place, queue) == 0
    old = time.time() - COPYING_GRACE_S - 1
    os.utime(stuck, (old, old))
    assert scan(place, queue) == 1, "a folder that never gets its secret is graded after the grace"


def test_the_zygotes_start_importing_only_once_an_assignment_is_graded_on_submit(tmp_path: Path,
                                                                                   monkeypatch) -> None:
    """And they import what the assignments turned on import: nothing heavy for one without torch; torch
    (once more, in new zygotes) when one that imports it is turned on too; nothing again after that."""
    from autograder.hub.service import autograde as autograde_service
    from autograder.hub.service.autograde import Place, Waiting, _loop
    from tests.factories import tiny_assignment

    launched = []

    class Recording:
        def __init__(self, folder, env, libraries):
            self.folder = folder
            self.libraries = libraries

        def launch(self, count):
            launched.append((count, self.libraries))

        def ready(self, count):
            return ()

        def stop(self):
            pass

    monkeypatch.setattr(autograde_service, "Standby", Recording)
    monkeypatch.setattr(autograde_service.shutil, "which", lambda name: f"/usr/bin/{name}")
    place = Place(tmp_path / "course", FolderAutograde.at(tmp_path / "exchange", COURSE))
    place.exchange.folders.inbound.mkdir(parents=True)
    for name, first_cell in (("tiny", None), ("ps01", "import torch\nimport numpy as np")):
        nb = tiny_assignment()
        if first_cell:
            nb.cells.insert(0, nbformat.v4.new_code_cell(first_cell))
        (place.course / "source" / name).mkdir(parents=True)
        nbformat.write(nb, place.course / "source" / name / f"{name}.ipynb")
    waiting = Waiting(2)
    _loop(place, 2, True, 4, waiting)
    assert launched == [] and not waiting.launched  # no assignment graded on submit: no torch anywhere
    place.queue().configure("tiny", True)
    _loop(place, 2, True, 4, waiting)
    assert launched == [(2, ())] and waiting.launched
    place.queue().configure("ps01", True)
    _loop(place, 2, True, 4, waiting)
    assert launched == [(2, ()), (2, ("torch", "numpy"))]
    place.queue().configure("tiny", False)
    _loop(place, 2, True, 4, waiting)
    assert launched == [(2, ()), (2, ("torch", "numpy"))]  # fewer wanted: the running ones serve
    waiting.stop()


# Deadlines, without a hub: the service itself on a scratch course and exchange

def utc_now() -> datetime.datetime:
    """Return the real time as nbgrader's timestamps are (naive UTC)."""
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)


class ScratchClass:
    """A course holding `tiny`, an exchange, and this user as the one student who submits."""

    def __init__(self, tmp_path: Path) -> None:
        import pwd

        from autograder.hub.service.autograde import Place
        from tests.grading.test_grading_end_to_end import make_course

        (tmp_path / "course").mkdir()
        self.course = make_course(tmp_path / "course")
        with (self.course / "nbgrader_config.py").open("a") as config:  # a late submission scores nothing
            config.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
        self.place = Place(self.course, FolderAutograde.at(tmp_path / "exchange", COURSE))
        self.student = pwd.getpwuid(os.getuid()).pw_name
        self.queue = self.place.queue()
        self.queue.configure("tiny", True, timeout=30)

    def due(self, moment: datetime.datetime) -> None:
        """Set the due date as `hub release --due` does (its `nbgrader db assignment add --duedate`: the same
        Gradebook call, made here, without a Python and an `alembic heads` process each time)."""
        from autograder.grading.gradebook import ensure_schema

        db_url = f"sqlite:///{self.course / 'gradebook.db'}"
        ensure_schema(db_url)
        with Gradebook(db_url, COURSE) as gb:
            gb.update_or_create_assignment("tiny", duedate=nbgrader_time(moment))

    def submit(self, claimed: datetime.datetime | None = None) -> str:
        """Write a right answer into the exchange, as nbgrader's submit does, claiming this time (by default
        the time it is written, as nbgrader's own: never one chosen before a slow step); return it."""
        from tests.grading.test_grading_end_to_end import assignment

        stamp = nbgrader_time(claimed or utc_now())
        folder = self.place.exchange.folders.inbound / f"{self.student}+tiny+{stamp}+{secrets.token_hex(4)}"
        folder.mkdir(parents=True)
        nbformat.write(assignment(), folder / "tiny.ipynb")
        (folder / "timestamp.txt").write_text(stamp)
        (folder / "submission_secret.txt").write_text(secrets.token_hex(8))
        return stamp

    def submit_as(self, account: str) -> str:
        """Submit a right answer in another account's name, made by that account (its folder and files)."""
        import pwd

        me, self.student = self.student, account
        try:
            stamp = self.submit()
        finally:
            self.student = me
        owner = pwd.getpwnam(account)
        (folder,) = self.place.exchange.folders.inbound.glob(f"{account}+tiny+{stamp}+*")
        for path in [folder, *folder.iterdir()]:
            os.chown(path, owner.pw_uid, owner.pw_gid)
        return stamp

    def serve_once(self) -> str:
        """Run the service until its queue is empty; return its log."""
        done = subprocess.run([sys.executable, "-m", "autograder.hub.service.autograde", "run", "--course",
                               str(self.course), "--exchange", str(self.place.exchange.folders.root),
                               "--course-id", COURSE, "--backend", "files", "--jobs", "1", "--once"],
                              cwd=COURSE_ROOT, env=with_venv_on_path(),
                              check=False, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr

    def graded(self, stamp: str):
        """Return the queue's entry for the submission claiming this time."""
        (entry,) = [e for e in self.queue.entries("tiny") if e.timestamp == stamp]
        return entry

    def penalty(self) -> float:
        with Gradebook(f"sqlite:///{self.course / 'gradebook.db'}", "device-lab") as gb:
            return gb.find_submission("tiny", self.student).late_submission_penalty


@pytest.mark.notebook
def test_deadlines_are_nbgrader_s_and_a_backdated_submission_is_graded_as_it_arrived(tmp_path: Path) -> None:
    """nbgrader trusts the time a submission states, and a student writes it: the service checks it.

    A student may write into the exchange's inbound with any folder name and timestamp.txt (nbgrader's
    exchange lets every student create folders there). The time the file system gave the folder's files
    cannot be set back by its owner, so a submission that claims to be older than its files is graded as
    made when its files were written, and the instructor is told.
    """
    now = utc_now()  # due dates an hour from it: far from any time a slow machine takes
    scratch = ScratchClass(tmp_path)
    scratch.due(now + datetime.timedelta(hours=1))
    on_time = scratch.submit()
    log = scratch.serve_once()
    entry = scratch.graded(on_time)
    assert (entry.state, entry.score, entry.max_score) == (State.DONE, 3, 3), log
    assert scratch.penalty() == 0 and "claims" not in entry.detail

    scratch.due(now - datetime.timedelta(hours=1))  # the deadline has passed: an honest late resubmission
    late = scratch.submit()
    log = scratch.serve_once()
    entry = scratch.graded(late)
    assert (entry.state, entry.score, entry.max_score) == (State.DONE, 0, 3), log
    assert scratch.penalty() == 3 and "claims" not in entry.detail

    (tmp_path / "second").mkdir()  # a student who first submits after the deadline, claiming a time before it
    scratch = ScratchClass(tmp_path / "second")
    scratch.due(now - datetime.timedelta(hours=1))
    backdated = scratch.submit(utc_now() - datetime.timedelta(hours=2))
    log = scratch.serve_once()
    entry = scratch.graded(backdated)
    assert (entry.state, entry.score, entry.max_score) == (State.DONE, 0, 3), log
    assert scratch.penalty() == 3
    assert f"claims {backdated}" in entry.detail and "graded as submitted at" in entry.detail, entry.detail
    assert "claims" in log
    status = subprocess.run([sys.executable, "-m", "autograder.hub.service.autograde", "status", "--course",
                             str(scratch.course), "tiny"], cwd=COURSE_ROOT, capture_output=True, text=True,
                            check=True).stdout
    assert entry.detail in status  # what `hub autograde status` prints, whole


@pytest.mark.notebook
def test_an_extension_moves_the_deadline_the_late_penalty_counts_from(tmp_path: Path) -> None:
    """`hub extend`: a student with an extension submits after the class's due date but before their own:
    no penalty, and their feedback page says which due date applied; taken back, the next submission is late.
    """
    from autograder.hub.due_dates import give

    now = utc_now()  # due dates an hour from it: far from any time a slow machine takes
    scratch = ScratchClass(tmp_path)
    scratch.due(now - datetime.timedelta(hours=1))
    db_url = f"sqlite:///{scratch.course / 'gradebook.db'}"
    with Gradebook(db_url, COURSE) as gb:
        gb.update_or_create_student(scratch.student)
    give(scratch.course, "tiny", scratch.student, hours=3)
    stamp = scratch.submit()
    log = scratch.serve_once()
    entry = scratch.graded(stamp)
    assert (entry.state, entry.score, entry.max_score) == (State.DONE, 3, 3), log
    assert scratch.penalty() == 0
    page = (scratch.place.graded("tiny") / "feedback" / scratch.student / "tiny.html").read_text()
    assert "your extension of 3 h" in page and "on time" in page, page[:3000]

    give(scratch.course, "tiny", scratch.student)  # taken back: the class's due date applies again
    late = scratch.submit()
    log = scratch.serve_once()
    assert (scratch.graded(late).state, scratch.graded(late).score) == (State.DONE, 0), log
    assert scratch.penalty() == 3


@pytest.mark.notebook
def test_the_services_grades_csv_and_summary_cover_every_student_graded_so_far(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("a submission made by a second account needs root to change its owner")
    scratch = ScratchClass(tmp_path)
    scratch.submit()
    scratch.serve_once()
    scratch.submit_as("nobody")  # a second student, graded in a later batch
    log = scratch.serve_once()
    out = scratch.place.graded("tiny")
    with (out / "grades.csv").open(newline="") as handle:
        rows = {r["student"]: r for r in csv.DictReader(handle)}
    assert sorted(rows) == sorted([scratch.student, "nobody"]), log
    assert all(float(r["score"]) == 3 for r in rows.values())
    summary = (out / "summary.html").read_text()
    assert f">{scratch.student}<" in summary and ">nobody<" in summary


def test_a_release_that_failed_when_announced_is_retried_as_graded_and_reused_results_are_not(monkeypatch):
    """A student announced by the grader counts as graded by this run even when their first release failed."""
    from autograder.grading.results import Status, StudentResult
    from autograder.hub.service import autograde as autograde_service

    released = []

    def release_result(place, queue, entry, result, staged, graded):
        if entry.student == "bob" and not released:
            raise OSError("the exchange was busy")
        released.append((entry.student, graded))

    monkeypatch.setattr(autograde_service, "release_result", release_result)
    entries = [_entry(name) for name in ("ann", "bob", "cat")]
    releaser = autograde_service.BatchReleaser(None, None, entries, None)
    results = {name: StudentResult(name, "tiny", Status.GRADED) for name in ("ann", "bob", "cat")}
    releaser.on_result(results["bob"])  # fails: stays pending
    releaser.on_result(results["ann"])
    assert released == [("ann", True)] and set(releaser.pending) == {"bob", "cat"}
    releaser.settle(results)  # cat's result was saved before a restart: reused, not graded now
    assert sorted(released) == [("ann", True), ("bob", True), ("cat", False)] and not releaser.pending


def _entry(student: str):
    from autograder.hub.service.autograde_queue import Entry

    return Entry(student, "tiny", "2026-11-25 10:00:00.000000 UTC", f"{student}+tiny+x", "secret",
                 State.GRADING, 0.0, 0.0, None, None, 1, 0, "", None, None, "")


@pytest.mark.notebook
def test_a_renamed_notebooks_feedback_is_found_by_nbgraders_fetch_feedback(tmp_path: Path) -> None:
    """Graded as the assignment's notebook, fed back under the student's own file name (what fetch looks up).
    """
    from tests.grading.test_grading_end_to_end import assignment

    scratch = ScratchClass(tmp_path)
    student_home = tmp_path / "home"
    # where the Assignments tab fetches it (the exchange names the course)
    work = student_home / COURSE / "tiny"
    work.mkdir(parents=True)
    nbformat.write(assignment(), work / "Copy of tiny (2).ipynb")
    exchange_args = [f"--Exchange.root={scratch.place.exchange.folders.root}",
                     "--Exchange.path_includes_course=True",
                     f"--Exchange.cache={tmp_path / 'cache'}", f"--CourseDirectory.course_id={COURSE}",
                     "--Authenticator.plugin_class=nbgrader.auth.NoAuthPlugin"]
    scratch.place.exchange.folders.inbound.mkdir(parents=True)
    scratch.place.exchange.folders.inbound.chmod(0o1777)
    released = scratch.place.exchange.folders.outbound / "tiny"
    released.mkdir(parents=True)
    nbformat.write(assignment(), released / "tiny.ipynb")
    for step in (["submit", "tiny"], None, ["fetch_feedback", "tiny"]):
        if step is None:
            log = scratch.serve_once()
            continue
        done = subprocess.run(["nbgrader", *step, *exchange_args], cwd=student_home, env=with_venv_on_path(),
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
    (entry,) = scratch.queue.entries("tiny")
    assert (entry.state, entry.score) == (State.DONE, 3), log
    pages = list((work / "feedback").glob("*/*.html"))
    assert len(pages) == 1, (sorted(p.name for p in scratch.place.exchange.folders.feedback.iterdir()),
                             done.stdout + done.stderr)
    (page,) = pages
    assert page.name == "Copy of tiny (2).html" and "Score: 3.0 / 3.0" in page.read_text()


# The service on a hub

@pytest.fixture
def hub(tmp_path: Path):
    """Make the accounts, set the hub up, start it; afterwards stop it and remove every trace."""
    hub_tests_or_skip()
    with class_hub(tmp_path, ROSTER) as running_hub:
        yield running_hub


def wait_for_feedback(server, assignment: str, after: str = "", seconds: float = 240) -> str:
    """Wait until the newest submission (newer than `after`) has feedback to fetch; return its timestamp."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        subs = submissions_of(server, assignment)
        if subs and subs[0]["timestamp"] > after and subs[0]["has_exchange_feedback"]:
            return subs[0]["timestamp"]
        time.sleep(0.5)
    pytest.fail(f"no feedback for {assignment} within {seconds} s: {submissions_of(server, assignment)[:1]}")


def fetched_score(server, assignment: str, stamp: str, notebook: str | None = None) -> tuple[float, float]:
    """Fetch the feedback (the student's Fetch Feedback) and return the score on the page of that submission.

    `notebook`: the file name the student submitted, when not the assignment's own.
    """
    reply = server.call("POST", "/assignments/fetch_feedback",
                        {"course_id": COURSE, "assignment_id": assignment})
    assert reply.status == 200 and reply.body["success"], reply
    folder = f"{COURSE}/{assignment}/feedback/{urllib.parse.quote(stamp)}"
    page_name = urllib.parse.quote(Path(notebook or f"{assignment}.ipynb").stem + ".html")
    page = server.call("GET", f"/api/contents/{folder}/{page_name}?type=file")
    assert page.status == 200, page
    match = SCORE.search(page.body["content"])
    assert match, page.body["content"][:500]
    return float(match["score"]), float(match["max"])


def queue_of(hub: Hub) -> Queue:
    """Return the hub's autograde queue, where the service keeps it (a sqlite file, or PostgreSQL)."""
    from autograder.hub.service.autograde import course_queue

    return course_queue(Path(hub.settings.paths.course))


def service_pids(hub: Hub) -> list[int]:
    """Return the autograde service's process ids (its command names this hub's config file for it)."""
    pids, course = [], str(hub.settings.paths.grader_etc / "autograde.json")
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            command = any(a.endswith(b"/devicelab-autograde") for a in argv)
            if command and b"run" in argv and course.encode() in argv:
                pids.append(int(entry.name))
    return pids


def main_service_pid(hub: Hub) -> int:
    """Return the service's own process (not one of its grading workers, which run the same command)."""
    pids = service_pids(hub)
    parents = {}
    for pid in pids:
        status = Path(f"/proc/{pid}/status").read_text()
        parents[pid] = int(next(x for x in status.splitlines() if x.startswith("PPid:")).split()[1])
    (main,) = [p for p in pids if parents[p] not in pids]
    return main


def test_submissions_are_graded_and_fed_back_without_an_instructor(hub: Hub) -> None:
    assignment = smallest_assignment()
    plan = {"ann": "right", "bob": "wrong", "cat": "hostile"}
    notebooks = answers(assignment)
    hub.cli("release", assignment)
    assert "on" in hub.cli("autograde", "on", assignment, "--timeout", "30").stdout
    assert service_pids(hub), "the hub did not start the autograde service"

    servers = {m: start_server(hub, m, hub.token(m)) for m in plan}
    submitted_at = {}
    for member in ("cat", "ann", "bob"):
        if member == "bob":  # once cat's batch is being graded: bob's submission joins it
            deadline = time.monotonic() + 60
            while not [e for e in queue_of(hub).entries(assignment, State.GRADING)
                       if e.student == hub.user("cat")] and time.monotonic() < deadline:
                time.sleep(0.2)
        hand_in(servers[member], assignment, notebooks[plan[member]])
        submitted_at[member] = time.monotonic()
    stamps, scores = {}, {}
    waited = {}
    for member in ("ann", "bob", "cat"):
        stamps[member] = wait_for_feedback(servers[member], assignment)
        waited[member] = time.monotonic() - submitted_at[member]
        print(f"{member}: feedback {waited[member]:.1f} s after Submit")
        if member == "bob":
            cat = [e for e in queue_of(hub).entries(assignment) if e.student == hub.user("cat")]
            assert [e.state for e in cat] == [State.GRADING], "bob waited for cat's whole batch to end"
    # The quick students do not wait for the hostile one graded beside them (its loop runs to the time limit),
    # whether they came in its batch or joined it while it ran (2 cores: cat holds one worker, bob the other).
    assert waited["ann"] < waited["cat"] - 10 and waited["bob"] < waited["cat"] - 10, waited
    assert re.search(rf"{re.escape(hub.user('bob'))} {assignment} [^\n]*: joins the batch being graded",
                     hub.log.read_text()), "bob's submission did not join the batch being graded"
    for member in plan:
        scores[member] = fetched_score(servers[member], assignment, stamps[member])
    top = scores["ann"][1]
    assert top > 0 and scores["ann"] == (top, top)
    assert scores["bob"][0] < top and scores["cat"][0] < top
    done = {e.student: e for e in queue_of(hub).entries(assignment)}
    assert {e.state for e in done.values()} == {State.DONE}
    assert done[hub.user("cat")].status == "timeout" and done[hub.user("bob")].status == "graded"
    grades = exported(hub, assignment)
    assert {m: grades[hub.user(m)] for m in plan} == {m: scores[m][0] for m in plan}
    # Students cannot reach the service's controls: it has no URL (no route, no HTTP), its queue and switch
    # are in the course folder, the grader's alone.
    services = HubAPI.for_settings(hub.settings).call("GET", "/services").body
    assert not services[f"{COURSE}-autograde"].get("url"), services
    refused(hub, "cat", ["ls", str(Path(hub.settings.paths.course) / "autograde")])

    # A resubmission replaces the grade (bob fixes his answers, in a copy he renamed): graded as the
    # assignment's notebook, its feedback reaches him under his own file name through Fetch Feedback.
    renamed = f"Copy of {assignment} (2).ipynb"
    hand_in(servers["bob"], assignment, notebooks["right"], fetch=False, name=renamed)
    newer = wait_for_feedback(servers["bob"], assignment, after=stamps["bob"])
    assert fetched_score(servers["bob"], assignment, newer, renamed) == (top, top)
    assert exported(hub, assignment)[hub.user("bob")] == top

    # Killed in the middle of a batch: nothing lost, nothing graded twice. Three resubmissions wait while
    # autograding is off, then go as one batch; the two quick ones are recorded, the hostile one still runs.
    hub.cli("autograde", "off", assignment)
    for member, kind in (("ann", "right"), ("bob", "wrong"), ("cat", "hostile")):
        hand_in(servers[member], assignment, notebooks[kind], fetch=False,
                name=renamed if member == "bob" else None)
    results = Path(hub.settings.paths.course) / "autograde" / "graded" / assignment / "results"
    # a shorter limit from here: cat's retry after the restart runs to it again (ann and bob take seconds)
    hub.cli("autograde", "on", assignment, "--timeout", "15")
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        newest = {e.student: e for e in queue_of(hub).entries(assignment)
                  if e.timestamp > {**stamps, "bob": newer}[e.student[len(hub.prefix):]]}
        if len(newest) == 3 and ([newest[hub.user(m)].state for m in plan]
                                 == [State.DONE, State.DONE, State.GRADING]):
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"the batch did not record the quick students first: {queue_of(hub).entries(assignment)}")
    pid = main_service_pid(hub)
    killed_scratch = [p for p in Path("/tmp").glob("dlg-*") if (p / "owner.json").is_file()
                      and json.loads((p / "owner.json").read_text())["pid"] == pid]
    os.kill(pid, signal.SIGKILL)
    recorded = {m: (results / f"{hub.user(m)}.json").stat().st_mtime_ns for m in plan}
    previous = {**stamps, "bob": newer}
    for member in plan:
        stamp = wait_for_feedback(servers[member], assignment, after=previous[member], seconds=300)
        assert stamp == newest[hub.user(member)].timestamp
    assert main_service_pid(hub) != pid, "the hub did not restart the service"
    after = {m: (results / f"{hub.user(m)}.json").stat().st_mtime_ns for m in plan}
    assert after["ann"] == recorded["ann"] and after["bob"] == recorded["bob"], (
        "graded again after the restart")
    assert after["cat"] != recorded["cat"]
    entries = queue_of(hub).entries(assignment)
    last = {e.student: e for e in entries if e.key == newest[e.student].key}
    assert [(last[hub.user(m)].state, last[hub.user(m)].tries) for m in plan] == [
        (State.DONE, 1), (State.DONE, 1), (State.DONE, 2)]
    assert all(e.graded for e in last.values())
    assert len(entries) == 7 and {e.state for e in entries} == {State.DONE}
    assert not [e.detail for e in entries if "claims" in e.detail]  # nbgrader's own submit: its times stand
    assert fetched_score(servers["ann"], assignment, newest[hub.user("ann")].timestamp) == (top, top)
    assert fetched_score(servers["cat"], assignment, newest[hub.user("cat")].timestamp)[0] < top
    assert "was being graded when the service stopped; queued again" in hub.log.read_text()
    # The killed batch's scratch (the hostile notebook's copy among it) and the folder of the zygotes that
    # waited for submissions are removed by the next batch.
    assert killed_scratch and not [p for p in killed_scratch if p.exists()]
    for folder in killed_scratch:
        assert f"removed {folder}, the scratch of a grading run that was killed" in hub.log.read_text()
