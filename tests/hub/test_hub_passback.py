"""Grade passback and the LMS roster against the LMS stand-in on loopback (a real LTI platform, no hub)."""

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from filelock import FileLock

from autograder.hub.lms import passback
from autograder.hub.lms.members import read_lms_roster
from autograder.hub.lms.passback_queue import PassbackQueue, PassbackState, Score, wait_after
from autograder.hub.lms.tool import ToolFiles, prepare
from autograder.hub.settings import LtiSettings
from tests.clock import ManualClock
from tests.lms_standin import INSTRUCTOR, TEACHING_ASSISTANT, LmsStandin, Person

ASSIGNMENT = "ps01-tensors-and-devices"
START = 1_800_000_000.0  # the queue's clock at the start of a test: it moves only when told
LIS = "http://purl.imsglobal.org/vocab/lis/v2/"
CANVAS_TA = (LIS + "institution/person#Student", INSTRUCTOR, TEACHING_ASSISTANT, LIS + "system/person#User")


@pytest.fixture
def lms(tmp_path: Path) -> Iterator[LmsStandin]:
    (tmp_path / "lms").mkdir()
    standin = LmsStandin(tmp_path / "lms")
    yield standin
    standin.close()


@pytest.fixture
def tool(tmp_path: Path, lms: LmsStandin) -> ToolFiles:
    """The tool's files, registered with the stand-in, knowing Ann's and Bob's LMS ids and the line items."""
    files = ToolFiles(tmp_path / "lti")
    prepare(files, LtiSettings(lms.issuer, lms.client_id, lms.deployment_id, lms.keyset_url,
                               lms.authorize_url, lms.token_url))
    lms.register_tool("http://127.0.0.1:1/hub/lti13/oauth_login", "http://127.0.0.1:1/hub/",
                      files.public_jwks())
    files.write_platform(replace(files.read_platform(), lineitems_url=lms.url + "/lineitems",
                                 memberships_url=lms.url + "/memberships",
                                 people={"t-ann": "lms-ann", "t-bob": "lms-bob"}))
    return files


def score(student: str = "t-ann", points: float = 7.0, status: str = "graded") -> Score:
    return Score(student, ASSIGNMENT, points, 10.0, status)


def rows(files: ToolFiles) -> dict[str, PassbackState]:
    queue = PassbackQueue.of_course(files.folder.parent, files.queue)  # where the hub keeps it
    try:
        return {r.score.student: r.state for r in queue.rows()}
    finally:
        queue.close()


def test_a_score_is_posted_once_to_a_line_item_made_for_the_assignment(lms: LmsStandin,
                                                                       tool: ToolFiles) -> None:
    assert passback.offer(tool, [score(), score("t-bob", 3.0, "timeout")]) == 2
    flushed = passback.flush(tool)
    assert sorted(s.student for s in flushed.sent) == ["t-ann", "t-bob"] and not flushed.failed
    book = lms.gradebook()
    [item] = book.lineitems.values()
    assert (item["tag"], item["label"], item["scoreMaximum"]) == (ASSIGNMENT, ASSIGNMENT, 10.0)
    posted = {s["userId"]: s for s in book.scores_of(ASSIGNMENT)}
    assert posted["lms-ann"]["scoreGiven"] == 7.0 and posted["lms-ann"]["gradingProgress"] == "FullyGraded"
    assert posted["lms-bob"]["gradingProgress"] == "PendingManual"  # not cleanly graded: a person looks
    assert posted["lms-bob"]["comment"] == "autograder: timeout"
    assert rows(tool) == {"t-ann": PassbackState.SENT, "t-bob": PassbackState.SENT}


def test_the_same_score_twice_is_one_post_and_a_changed_score_one_more(lms: LmsStandin,
                                                                       tool: ToolFiles) -> None:
    passback.offer(tool, [score()])
    passback.flush(tool)
    assert passback.offer(tool, [score()]) == 0  # graded again, same score: nothing to send
    assert passback.flush(tool).sent == []
    assert passback.offer(tool, [score(points=9.0)]) == 1
    assert [s.score for s in passback.flush(tool).sent] == [9.0]
    assert passback.flush(tool).sent == []
    posts = lms.gradebook().scores_of(ASSIGNMENT)
    assert [p["scoreGiven"] for p in posts] == [7.0, 9.0]
    assert len(lms.gradebook().lineitems) == 1  # found again by its tag, not made twice


def test_while_the_lms_is_down_scores_wait_and_are_sent_once_it_is_back(lms: LmsStandin,
                                                                        tool: ToolFiles) -> None:
    clock = ManualClock(START)
    passback.offer(tool, [score()], clock)
    lms.down = True
    flushed = passback.flush(tool, clock)
    assert flushed.sent == [] and "HTTP 503" in flushed.failed[0][1]
    assert rows(tool) == {"t-ann": PassbackState.PENDING}
    lms.down = False
    clock.advance(wait_after(1) - 1)
    assert passback.flush(tool, clock).sent == []  # still waiting: no retry before its time
    clock.advance(1)
    assert [s.student for s in passback.flush(tool, clock).sent] == ["t-ann"]  # its wait is over: at once
    clock.advance(10_000)
    assert passback.flush(tool, clock).sent == []
    assert len(lms.gradebook().scores_of(ASSIGNMENT)) == 1


def test_an_unreachable_lms_keeps_the_score_pending(tmp_path: Path, lms: LmsStandin, tool: ToolFiles) -> None:
    tool.write_platform(replace(tool.read_platform(), token_url="http://127.0.0.1:9/token"))  # nobody there
    passback.offer(tool, [score()])
    flushed = passback.flush(tool)
    assert "could not be reached" in flushed.failed[0][1]
    assert rows(tool) == {"t-ann": PassbackState.PENDING}


def test_waits_grow_and_stop_growing_at_an_hour() -> None:
    assert [wait_after(n) for n in (1, 2, 3)] == [30, 60, 120]
    assert wait_after(50) == 3600


def test_a_student_the_lms_does_not_know_yet_is_failed_with_the_reason(tool: ToolFiles) -> None:
    passback.offer(tool, [score("t-cat")])
    flushed = passback.flush(tool)
    assert "has not opened the hub from the LMS" in flushed.failed[0][1]
    assert rows(tool) == {"t-cat": PassbackState.FAILED}
    lines = passback.status_lines(tool, ASSIGNMENT)
    assert "t-cat" in lines[0] and "failed" in lines[0]
    assert lines[-1] == "0 pending, 0 sent, 1 failed, 0 unsendable"


def test_a_tool_key_the_lms_does_not_know_is_refused(lms: LmsStandin, tool: ToolFiles) -> None:
    lms.register_tool(lms.tool_login_url, lms.tool_launch_url, {"keys": []})
    passback.offer(tool, [score()])
    assert "HTTP 400" in passback.flush(tool).failed[0][1]
    assert lms.gradebook().scores == []


def test_a_score_that_changed_while_it_was_posted_is_not_marked_sent(tmp_path: Path) -> None:
    clock = ManualClock(START)
    queue = PassbackQueue(tmp_path / "q.sqlite", clock)
    queue.offer(score(points=5.0))
    clock.advance(1)
    [due] = queue.due()
    clock.advance(1)
    queue.offer(score(points=6.0))  # the autograde service recorded a resubmission meanwhile
    clock.advance(1)
    assert not queue.sent(due.score)
    clock.advance(1)
    assert [r.score.score for r in queue.due()] == [6.0]  # the new value is still to be posted
    queue.close()


def test_one_flush_at_a_time(tool: ToolFiles) -> None:
    passback.offer(tool, [score()])
    with FileLock(f"{tool.queue}.lock"):
        assert passback.flush(tool).busy
    assert rows(tool) == {"t-ann": PassbackState.PENDING}


def test_the_cli_queues_grades_csv_and_reports(tmp_path: Path, lms: LmsStandin, tool: ToolFiles,
                                               capsys: pytest.CaptureFixture) -> None:
    graded = tmp_path / "graded" / ASSIGNMENT
    graded.mkdir(parents=True)
    (graded / "grades.csv").write_text("student,score,max_score,status,detail\nt-ann,8,10,graded,\n")
    assert passback.main(["offer", ASSIGNMENT, "--course", str(tmp_path)]) == 0
    assert "posted to the LMS: t-ann" in capsys.readouterr().out
    assert passback.main(["status", "--course", str(tmp_path)]) == 0
    assert "0 pending, 1 sent, 0 failed, 0 unsendable" in capsys.readouterr().out
    assert [s["scoreGiven"] for s in lms.gradebook().scores] == [8.0]


def test_the_roster_from_the_lms_maps_names_and_roles(lms: LmsStandin, tool: ToolFiles) -> None:
    lms.enrol(Person("lms-ann", "Ann Lee", "ann@school.example"))
    lms.enrol(Person("lms-gil", "Gil Marker", "gil@school.example", (TEACHING_ASSISTANT,)))
    lms.enrol(Person("lms-ivy", "Ivy Teach", "ivy@school.example", (INSTRUCTOR,)))
    lms.enrol(Person("lms-x", "No Mail", "", ("http://purl.imsglobal.org/vocab/lis/v2/membership#Mentor",)))
    found = read_lms_roster(tool, "email")
    assert {(m.base, m.role, m.key.sub) for m in found.members} == {
        ("ann", "student", "lms-ann"), ("gil", "grader", "lms-gil"), ("ivy", "instructor", "lms-ivy")}
    assert {(m.key.issuer, m.key.deployment_id) for m in found.members} == {(lms.issuer, lms.deployment_id)}
    assert found.skipped == ["No Mail: not an active learner, TA or instructor"]


def test_lms_members_are_keyed_by_their_lms_id_and_their_names_are_one_line_labels(lms: LmsStandin,
                                                                                  tool: ToolFiles) -> None:
    lms.enrol(Person("lms-nel", "Nel\nLine", "nel@school.example"))
    lms.enrol(Person("lms-hyp", '=HYPERLINK("http://x")', "hyp@school.example"))
    lms.enrol(Person("lms-gil", "Gil Marker", "gil@school.example", CANVAS_TA))
    lms.enrol(Person("lms-kim", "Kim", "\u212aim@school.example"))  # the Kelvin sign
    lms.enrol(Person("lms-nomail", "No Mail", ""))
    found = read_lms_roster(tool, "email")
    people = {m.key.sub: m for m in found.members}
    assert people["lms-nel"].name == "Nel Line" and people["lms-hyp"].name == '=HYPERLINK("http://x")'
    assert (people["lms-gil"].role, people["lms-kim"].base) == ("grader", "kim")
    [skipped] = found.skipped
    assert skipped.startswith("No Mail: the LMS sent no 'email' for this person"), skipped


def test_a_score_of_an_assignment_without_points_is_reported_once_and_never_retried(lms: LmsStandin,
                                                                                    tool: ToolFiles) -> None:
    clock = ManualClock(START)
    passback.offer(tool, [Score("t-ann", ASSIGNMENT, 0.0, 0.0, "graded")], clock)
    flushed = passback.flush(tool, clock)
    assert flushed.sent == [] and "no points" in flushed.failed[0][1]
    assert rows(tool) == {"t-ann": PassbackState.UNSENDABLE}
    clock.advance(10**8)
    assert passback.flush(tool, clock) == passback.Flushed([], [])  # not tried nor reported again
    assert "no points" in passback.status_lines(tool, ASSIGNMENT)[0]
    assert lms.gradebook().lineitems == {}
    passback.offer(tool, [score()], clock)  # the assignment has points now: its next score goes
    assert [s.student for s in passback.flush(tool, clock).sent] == ["t-ann"]


def test_the_service_flushes_at_most_every_few_seconds(lms: LmsStandin, tool: ToolFiles) -> None:
    ticks = ManualClock(100)  # the service's monotonic clock
    pace = passback.Pacer(tool, every_s=5, clock=ticks)
    passback.offer(tool, [score()])
    pace()
    passback.offer(tool, [score(points=8.0)])
    ticks.advance(4)
    pace()
    assert [p["scoreGiven"] for p in lms.gradebook().scores] == [7.0]
    ticks.advance(1)
    pace()
    assert [p["scoreGiven"] for p in lms.gradebook().scores] == [7.0, 8.0]
