"""The exchange without a hub: folder names, owners, the safe copy, collect, feedback and the tree's modes.

Each attack a hostile student can make on the exchange's inbound is made here on tmp folders (as root, with
`nobody` standing for a second account where an owner matters), then the defence is checked.
"""

import datetime
import os
import pwd
import stat
import threading
from pathlib import Path

import pytest

from autograder import safe_copy
from autograder.hub.exchange.arrival import STAMP_FILE, nbgrader_time
from autograder.hub.exchange.folder import tree as exchange
from autograder.hub.exchange.folder.tree import BadName, Exchange, InboundName
from autograder.hub.text import printable
from autograder.safe_copy import Limits, Refusal, copy_tree, read_small

NOW = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
ME = pwd.getpwuid(os.getuid()).pw_name


def needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")


def nobody() -> pwd.struct_passwd:
    return pwd.getpwnam("nobody")


def run_with_timeout(call, seconds: float = 20):
    """Run `call` in a thread; fail (instead of hanging the suite) if it has not returned in time."""
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001  (handed back to the test)
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the copy blocked"
    if "error" in box:
        raise box["error"]
    return box["value"]


# Folder names

def test_a_name_nbgrader_writes_parses_and_formats_back() -> None:
    for name in (f"ann+ps01+{nbgrader_time(NOW)}+Zx_9-a", "ann+ps01+2026-01-01 10:00:00 UTC"):
        parsed = InboundName.parse(name)
        assert isinstance(parsed, InboundName) and parsed.format() == name
        assert (parsed.student, parsed.assignment) == ("ann", "ps01")
    assert InboundName.parse("ann+ps01+2026-01-01 10:00:00 UTC+x").when == datetime.datetime(2026, 1, 1, 10)


def test_a_malformed_name_is_a_typed_refusal_never_an_exception() -> None:
    for name, said in (("ann+ps01", "not named"), ("ann+ps01+t+x+y", "not named"),
                       ("+ps01+2026-01-01", "not named"), ("ann+ps01+not a time+x", "cannot be read"),
                       ("ann+ps01+9999-99-99 99:99:99 UTC+x", "cannot be read"),
                       ("ann\x1b[31m+ps01+2026-01-01 10:00:00 UTC+x", "control characters")):
        parsed = InboundName.parse(name)
        assert isinstance(parsed, BadName) and said in parsed.reason, (name, parsed)
    line = BadName("a\x1b[2Jb", "why").line()
    assert "\x1b" not in line and "\\x1b[2J" in line


def test_printable_escapes_terminal_sequences_and_keeps_the_rest() -> None:
    assert printable("ann\x1b]0;owned\x07 ok\u202e é") == "ann\\x1b]0;owned\\x07 ok\\u202e é"


# The safe copy

def test_links_to_course_files_are_refused_and_never_followed(tmp_path: Path) -> None:
    secret = tmp_path / "source.ipynb"
    secret.write_text("THE SOLUTIONS")
    (tmp_path / "gradebook").mkdir()
    src = tmp_path / "sub"
    (src / "deep").mkdir(parents=True)
    (src / "ps01.ipynb").symlink_to(secret)
    (src / "gradebook").symlink_to(tmp_path / "gradebook")
    (src / "deep" / "own.txt").write_text("mine")
    report = copy_tree(src, tmp_path / "out")
    assert report.copied == ["deep/own.txt"]
    assert {r.path: r.reason for r in report.refused} == {"gradebook": "a symbolic link, not copied",
                                                           "ps01.ipynb": "a symbolic link, not copied"}
    assert sorted(p.name for p in (tmp_path / "out").rglob("*")) == ["deep", "own.txt"]
    (tmp_path / "link").symlink_to(src)
    with pytest.raises(Refusal, match="without following a link"):
        copy_tree(tmp_path / "link", tmp_path / "out2")


def test_a_fifo_named_like_the_secret_never_blocks(tmp_path: Path) -> None:
    src = tmp_path / "sub"
    src.mkdir()
    os.mkfifo(src / "submission_secret.txt")
    (src / "ps01.ipynb").write_text("{}")
    report = run_with_timeout(lambda: copy_tree(src, tmp_path / "out"))
    assert report.copied == ["ps01.ipynb"] and report.refused[0].reason == "a FIFO, not copied"
    with pytest.raises(Refusal, match="FIFO"):
        run_with_timeout(lambda: read_small(src, "submission_secret.txt"))


def test_a_fifo_swapped_in_after_the_check_is_opened_without_blocking_and_refused(tmp_path: Path,
                                                                                  monkeypatch) -> None:
    src = tmp_path / "sub"
    src.mkdir()
    (src / "timestamp.txt").write_text("now")
    real_stat = os.stat

    def stat_then_swap(path, *args, **kwargs):
        seen = real_stat(path, *args, **kwargs)
        if path == "timestamp.txt":
            os.unlink("timestamp.txt", dir_fd=kwargs["dir_fd"])
            os.mkfifo("timestamp.txt", dir_fd=kwargs["dir_fd"])
        return seen

    monkeypatch.setattr(safe_copy.os, "stat", stat_then_swap)
    report = run_with_timeout(lambda: copy_tree(src, tmp_path / "out"))
    assert report.copied == [] and report.refused[0].reason == "a FIFO, not copied"


def test_a_huge_sparse_file_is_refused_without_being_read(tmp_path: Path, monkeypatch) -> None:
    src = tmp_path / "sub"
    src.mkdir()
    with (src / "huge.bin").open("wb") as handle:
        handle.truncate(1 << 30)  # 1 GiB, no blocks on disk
    (src / "ps01.ipynb").write_text("{}")
    read = []
    real = safe_copy.read_bounded
    monkeypatch.setattr(safe_copy, "read_bounded", lambda fd, size: read.append(size) or real(fd, size))
    report = copy_tree(src, tmp_path / "out")
    assert report.copied == ["ps01.ipynb"] and read == [2]
    assert "1024.0 MiB, more than the 20 MiB allowed" in report.refused[0].reason


def test_a_file_that_grows_while_copied_is_cut_at_its_checked_size(tmp_path: Path, monkeypatch) -> None:
    src = tmp_path / "sub"
    src.mkdir()
    (src / "grows.txt").write_text("12345")
    real_fstat = os.fstat

    def fstat_then_grow(fd):
        seen = real_fstat(fd)
        if stat.S_ISREG(seen.st_mode):
            with (src / "grows.txt").open("a") as handle:
                handle.write("x" * 100_000)
        return seen

    monkeypatch.setattr(safe_copy.os, "fstat", fstat_then_grow)
    copy_tree(src, tmp_path / "out")
    assert (tmp_path / "out" / "grows.txt").read_text() == "12345"


def test_caps_on_depth_count_and_total_size(tmp_path: Path) -> None:
    deep = tmp_path / "deep"
    (deep / "/".join("d" * 12)).mkdir(parents=True)
    (deep / "top.txt").write_text("ok")
    report = copy_tree(deep, tmp_path / "out-deep", Limits(depth=4))
    assert report.copied == ["top.txt"] and "nested deeper than 4" in report.refused[0].reason
    many = tmp_path / "many"
    many.mkdir()
    for n in range(30):
        (many / f"f{n:02}").write_text("x")
    stopped = copy_tree(many, tmp_path / "out-many", Limits(entries=10)).stopped
    assert stopped == "more than 10 files and folders"
    big = copy_tree(many, tmp_path / "out-big", Limits(total_bytes=5))
    assert big.stopped == f"more than {5 / safe_copy.MiB:g} MiB in all" and len(big.copied) == 5


def test_a_file_swapped_for_a_link_after_listing_never_leaks_its_target(tmp_path: Path, monkeypatch) -> None:
    secret = tmp_path / "gradebook.db"
    secret.write_text("EVERYONE'S GRADES")
    src = tmp_path / "sub"
    src.mkdir()
    for name in ("a.ipynb", "b.ipynb"):
        (src / name).write_text("{}")
    real_listdir, real_stat = os.listdir, os.stat

    def listdir_then_swap(fd):
        names = real_listdir(fd)
        os.unlink("a.ipynb", dir_fd=fd)
        os.symlink(secret, "a.ipynb", dir_fd=fd)
        return names

    def stat_then_swap(path, *args, **kwargs):  # the check sees a file; the open finds a link
        seen = real_stat(path, *args, **kwargs)
        if path == "b.ipynb":
            os.unlink("b.ipynb", dir_fd=kwargs["dir_fd"])
            os.symlink(secret, "b.ipynb", dir_fd=kwargs["dir_fd"])
        return seen

    monkeypatch.setattr(safe_copy.os, "listdir", listdir_then_swap)
    monkeypatch.setattr(safe_copy.os, "stat", stat_then_swap)
    report = copy_tree(src, tmp_path / "out")
    assert report.copied == [] and {r.reason for r in report.refused} == {"a symbolic link, not copied"}
    assert not any("GRADES" in p.read_text() for p in (tmp_path / "out").rglob("*") if p.is_file())


def test_files_owned_by_someone_else_are_refused(tmp_path: Path) -> None:
    needs_root()
    src = tmp_path / "sub"
    src.mkdir()
    (src / "mine.txt").write_text("mine")
    (src / "theirs.txt").write_text("planted")
    os.chown(src / "theirs.txt", nobody().pw_uid, nobody().pw_gid)
    report = copy_tree(src, tmp_path / "out", owner=os.getuid())
    assert report.copied == ["mine.txt"] and "owned by user id" in report.refused[0].reason
    with pytest.raises(Refusal, match="owned by user id"):
        copy_tree(src, tmp_path / "out2", owner=nobody().pw_uid)


def test_a_file_is_written_afresh_never_through_a_link(tmp_path: Path) -> None:
    target = tmp_path / "victim.txt"
    target.write_text("untouched")
    (tmp_path / "page.html").symlink_to(target)
    safe_copy.write_new(tmp_path, "page.html", b"<p>feedback</p>", 0o644)
    assert target.read_text() == "untouched" and not (tmp_path / "page.html").is_symlink()
    assert (tmp_path / "page.html").stat().st_mode & 0o777 == 0o644


# The inbound: owners, bad names, far-future names

def submission(inbound: Path, student: str, when: datetime.datetime | str,
               owner: pwd.struct_passwd | None = None, files: dict[str, str] | None = None,
               suffix: str = "x") -> Path:
    """Write a submission folder as nbgrader's submit does (owned by `owner`, default this account)."""
    stamp = when if isinstance(when, str) else nbgrader_time(when)
    folder = inbound / f"{student}+ps01+{stamp}+{suffix}"
    folder.mkdir(parents=True)
    for name, text in {"ps01.ipynb": "{}", STAMP_FILE: stamp, "submission_secret.txt": "s3cret",
                       **(files or {})}.items():
        (folder / name).write_text(text)
    if owner is not None:
        for path in [folder, *folder.iterdir()]:
            os.chown(path, owner.pw_uid, owner.pw_gid)
    return folder


def test_forged_malformed_and_far_future_folders_are_skipped_and_the_victims_own_newest_is_kept(
        tmp_path: Path) -> None:
    needs_root()
    ex = Exchange(tmp_path / "exchange", "course")
    real = submission(ex.inbound, ME, NOW - datetime.timedelta(minutes=1), suffix="real")
    submission(ex.inbound, ME, NOW - datetime.timedelta(hours=1), suffix="older")
    submission(ex.inbound, ME, "2099-01-01 00:00:00.000000 UTC", owner=nobody(), suffix="forged")
    submission(ex.inbound, ME, "2098-01-01 00:00:00.000000 UTC", suffix="own-future")
    submission(ex.inbound, ME, "yesterday at noon", suffix="bad")
    (ex.inbound / f"{ME}+ps01+2097-01-01 00:00:00 UTC+link").symlink_to(real)
    inbox = ex.read_inbox({"ps01"}, now=NOW)
    assert inbox.newest()[ME].folder == real
    reasons = sorted(b.reason for b in inbox.skipped)
    assert len(reasons) == 4
    assert any(f"claims to be {ME}'s but was made by nobody" in r for r in reasons)
    assert any("named for a time in the future" in r for r in reasons)
    assert any("cannot be read" in r for r in reasons) and any("not a folder" in r for r in reasons)


# Collect, without a hub (this account is the student; the course is a tmp folder)

def collect_here(tmp_path: Path) -> tuple[Path, Exchange]:
    course = tmp_path / "course"
    course.mkdir(exist_ok=True)
    return course, Exchange(tmp_path / "exchange", "course")


def test_collect_takes_the_newest_own_submission_and_gives_it_a_time_it_cannot_fake(tmp_path: Path) -> None:
    course, ex = collect_here(tmp_path)
    backdated = nbgrader_time(NOW - datetime.timedelta(hours=3))
    submission(ex.inbound, ME, NOW - datetime.timedelta(hours=4), files={STAMP_FILE: backdated}, suffix="b")
    report = exchange.collect(course, ex, "ps01", "course")
    (done,) = report.collected
    assert done.student == ME and f"claims {backdated}" in done.notes
    collected = course / "submitted" / ME / "ps01"
    assert (collected / STAMP_FILE).read_text() == done.timestamp != backdated
    assert (collected / "ps01.ipynb").read_text() == "{}"
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "course") as gb:
        assert gb.find_student(ME).id == ME
    again = exchange.collect(course, ex, "ps01", "course")
    assert again.unchanged == [ME] and again.collected == []
    newer = submission(ex.inbound, ME, NOW, suffix="c")
    (newer / STAMP_FILE).unlink()  # no timestamp: the time its files were written
    (done,) = exchange.collect(course, ex, "ps01", "course").collected
    assert "has no readable timestamp.txt" in done.notes
    assert (collected / STAMP_FILE).read_text().endswith(" UTC")


def test_one_bad_submission_is_one_students_problem(tmp_path: Path) -> None:
    needs_root()
    course, ex = collect_here(tmp_path)
    submission(ex.inbound, "nobody", NOW, owner=nobody(), files={f"f{n}": "x" for n in range(1200)})
    submission(ex.inbound, ME, NOW, files={"ps01.ipynb": '{"ok": 1}'})
    os.mkfifo(ex.inbound / next(p for p in os.listdir(ex.inbound) if p.startswith(ME)) / "extra.bin")
    (ex.inbound / "bad+ps01+???+x").mkdir()
    report = run_with_timeout(lambda: exchange.collect(course, ex, "ps01", "course"), 60)
    assert [c.student for c in report.collected] == [ME] and "extra.bin: a FIFO" in report.collected[0].notes
    lines = "\n".join(report.lines())
    assert "nobody+ps01+" in lines and "more than 1000 files and folders" in lines
    assert "bad+ps01+???+x: " in lines and not (course / "submitted" / "nobody").exists()
    assert exchange.CollectReport.from_json(report.to_json()) == report


def test_feedback_goes_back_by_the_secret_as_fresh_files(tmp_path: Path) -> None:
    from nbgrader.utils import notebook_hash

    course, ex = collect_here(tmp_path)
    ex.course.mkdir(parents=True)
    page = f"{notebook_hash(secret='s3cret', notebook_id='ps01')}.html"
    ex.feedback.mkdir(mode=0o711)
    (ex.feedback / page).symlink_to(tmp_path / "victim")
    (tmp_path / "victim").write_text("untouched")
    exchange.release_feedback(ex, course, ME, "ps01", "t", "s3cret", {"ps01": "<p>3/3</p>"})
    assert (ex.feedback / page).read_text() == "<p>3/3</p>"
    assert (tmp_path / "victim").read_text() == "untouched"
    assert (ex.feedback / page).stat().st_mode & 0o777 == 0o644
    assert (course / "feedback" / ME / "ps01" / "submission_secret.txt").read_text() == "s3cret"


# The exchange's tree and release

def test_the_tree_is_roots_and_planted_folders_are_removed(tmp_path: Path) -> None:
    needs_root()
    ex = Exchange(tmp_path / "exchange", "course")
    ex.outbound.mkdir(parents=True)  # a student made the course folder before the first release
    for folder in (ex.course, ex.outbound):
        os.chown(folder, nobody().pw_uid, nobody().pw_gid)
        folder.chmod(0o777)
    (ex.outbound / "ps01").mkdir()
    (ex.outbound / "ps01" / "ps01.ipynb").write_text("a trap")
    grader = pwd.getpwnam(ME)
    repaired = exchange.secure_tree(ex, grader.pw_uid, grader.pw_gid)
    assert any("planted by user id" in line for line in repaired)
    modes = {p.name: (p.stat().st_uid, p.stat().st_mode & 0o7777) for p in (ex.root, ex.course, ex.inbound,
                                                                            ex.outbound, ex.feedback)}
    assert modes == {"exchange": (0, 0o1777), "course": (0, 0o755), "inbound": (0, 0o1753),
                     "outbound": (0, 0o755), "feedback": (grader.pw_uid, 0o711)}
    assert list(ex.outbound.iterdir()) == []
    (ex.outbound / "ps02").symlink_to(tmp_path)  # planted in the outbound (by a root-owned tree's old owner)
    (ex.feedback).chmod(0o777)
    exchange.secure_tree(ex, grader.pw_uid, grader.pw_gid)
    assert list(ex.outbound.iterdir()) == [] and ex.feedback.stat().st_mode & 0o777 == 0o711

    release = tmp_path / "release" / "ps01"
    (release / "data").mkdir(parents=True)
    (release / "ps01.ipynb").write_text("{}")
    (release / "data" / "x.csv").write_text("1")
    exchange.release(ex, release, "ps01", force=False)
    out = ex.outbound / "ps01"
    assert {p.relative_to(out).as_posix(): p.stat().st_mode & 0o777 for p in out.rglob("*")} == {
        "ps01.ipynb": 0o644, "data": 0o755, "data/x.csv": 0o644}
    with pytest.raises(FileExistsError):
        exchange.release(ex, release, "ps01", force=False)
    exchange.release(ex, release, "ps01", force=True)
    assert (out / "ps01.ipynb").is_file()


# formgrader's buttons (nbgrader's API, with the grader service's ExchangeFactory settings)

def formgrader_api(course: Path, ex: Exchange):
    from nbgrader.apps import NbGraderAPI
    from nbgrader.auth import NoAuthPlugin
    from traitlets.config import Config

    config = Config()
    config.CourseDirectory.root = str(course)
    config.CourseDirectory.course_id = "course"
    config.Exchange.root = str(ex.root)
    config.Exchange.path_includes_course = True
    config.Authenticator.plugin_class = NoAuthPlugin
    config.ExchangeFactory.collect = "autograder.hub.exchange.folder.formgrader.SafeCollect"
    config.ExchangeFactory.release_assignment = "autograder.hub.exchange.folder.formgrader.RootRelease"
    return NbGraderAPI(config=config)


def test_formgraders_collect_button_takes_the_safe_collect(tmp_path: Path) -> None:
    needs_root()
    course, ex = collect_here(tmp_path)
    secret = tmp_path / "solutions.ipynb"
    secret.write_text("THE SOLUTIONS")
    real = submission(ex.inbound, ME, NOW - datetime.timedelta(minutes=1), suffix="real")
    (real / "answers.ipynb").symlink_to(secret)
    submission(ex.inbound, ME, "2099-01-01 00:00:00.000000 UTC", owner=nobody(), suffix="forged")
    done = formgrader_api(course, ex).collect("ps01")
    assert done["success"], done
    collected = course / "submitted" / ME / "ps01"
    assert sorted(p.name for p in collected.iterdir()) == ["ps01.ipynb", "submission_secret.txt", STAMP_FILE]
    assert "2099" not in (collected / STAMP_FILE).read_text()
    assert f"claims to be {ME}'s but was made by nobody" in done["log"]


def test_formgraders_release_button_says_to_use_hub_release(tmp_path: Path) -> None:
    course, ex = collect_here(tmp_path)
    (course / "release" / "ps01").mkdir(parents=True)
    done = formgrader_api(course, ex).release_assignment("ps01")
    assert not done["success"] and "hub release ps01" in done["log"]
