"""A submission's time: the one it states when the file system agrees, else when its files were written."""

import datetime
from pathlib import Path

from autograder.hub.arrival import STAMP_FILE, TOLERANCE, Arrival, arrival, nbgrader_time

NOW = datetime.datetime(2026, 11, 24, 12, 0, 0)


def submission(tmp_path: Path, stamp: str | None) -> Path:
    folder = tmp_path / "ann+ps01+x+abc"
    folder.mkdir()
    (folder / "ps01.ipynb").write_text("{}")
    if stamp is not None:
        (folder / STAMP_FILE).write_text(stamp)
    return folder


def test_a_stated_time_within_the_tolerance_of_the_files_stands() -> None:
    for claimed in (NOW, NOW - TOLERANCE + datetime.timedelta(seconds=1), NOW + datetime.timedelta(days=1)):
        seen = Arrival(nbgrader_time(claimed), NOW)
        assert seen.trusted and seen.timestamp == nbgrader_time(claimed) and seen.note() == ""


def test_a_time_older_than_the_files_or_none_at_all_gives_way_to_when_the_files_were_written() -> None:
    for claimed, said in ((nbgrader_time(NOW - TOLERANCE - datetime.timedelta(seconds=1)), "claims 2026-11-24 11:57"),
                          (None, "has no readable timestamp.txt"), ("yesterday-ish", "claims yesterday-ish")):
        seen = Arrival(claimed, NOW)
        assert not seen.trusted and seen.timestamp == "2026-11-24 12:00:00.000000 UTC"
        assert said in seen.note() and "graded as submitted at 2026-11-24 12:00:00.000000 UTC" in seen.note()


def test_reading_a_folder_takes_the_newest_change_of_any_file_in_it(tmp_path: Path) -> None:
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    folder = submission(tmp_path, nbgrader_time(now))
    (folder / "deep" / "er").mkdir(parents=True)
    (folder / "deep" / "er" / "late.txt").write_text("written now")
    seen = arrival(folder)
    assert seen.claimed == nbgrader_time(now) and seen.trusted
    assert abs(seen.written - now) < datetime.timedelta(seconds=30)


def test_a_linked_or_undecodable_timestamp_is_no_timestamp(tmp_path: Path) -> None:
    elsewhere = tmp_path / "stamp.txt"
    elsewhere.write_text(nbgrader_time(NOW))
    folder = submission(tmp_path, None)
    (folder / STAMP_FILE).symlink_to(elsewhere)
    assert arrival(folder).claimed is None
    (folder / STAMP_FILE).unlink()
    (folder / STAMP_FILE).write_bytes(b"\xff\xfe2026")
    assert arrival(folder).claimed is None and not arrival(folder).trusted


def test_collected_submissions_get_the_time_of_the_folder_nbgrader_collected(tmp_path: Path) -> None:
    """After `nbgrader collect`: only the student's own newest folder counts, and only a false time is changed."""
    import os
    import pwd

    from autograder.hub.arrival import recheck_collected

    me = pwd.getpwuid(os.getuid()).pw_name
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    honest, backdated = nbgrader_time(now), nbgrader_time(now - datetime.timedelta(hours=3))
    inbound, course = tmp_path / "inbound", tmp_path / "course"
    for name, stamp in ((f"{me}+ps01+2026-01-01 09:00:00 UTC+a", honest),  # older by name: not the one collected
                        (f"{me}+ps01+2026-01-01 10:00:00 UTC+b", backdated),
                        (f"{me}+ps02+2026-01-01 10:00:00 UTC+c", honest)):
        (inbound / name).mkdir(parents=True)
        (inbound / name / STAMP_FILE).write_text(stamp)
    for assignment in ("ps01", "ps02"):
        (course / "submitted" / me / assignment).mkdir(parents=True)
    (course / "submitted" / me / "ps01" / STAMP_FILE).write_text(backdated)  # what nbgrader copied
    (course / "submitted" / me / "ps02" / STAMP_FILE).write_text(honest)

    (line,) = recheck_collected(course, inbound, "ps01")
    assert line.startswith(f"{me}: the submission claims {backdated}; graded as submitted at ")
    fixed = (course / "submitted" / me / "ps01" / STAMP_FILE).read_text()
    assert fixed != backdated and abs(arrival(inbound / f"{me}+ps01+2026-01-01 10:00:00 UTC+b").written
                                      - datetime.datetime.strptime(fixed, "%Y-%m-%d %H:%M:%S.%f UTC")) < TOLERANCE
    assert recheck_collected(course, inbound, "ps01") == []  # already fixed: nothing more to say
    assert recheck_collected(course, inbound, "ps02") == []
    assert (course / "submitted" / me / "ps02" / STAMP_FILE).read_text() == honest


def test_a_collected_submission_without_a_timestamp_gets_one(tmp_path: Path) -> None:
    """A student who deletes timestamp.txt is not left undated (nbgrader would apply no late penalty)."""
    import os
    import pwd

    from autograder.hub.arrival import recheck_collected

    me = pwd.getpwuid(os.getuid()).pw_name
    inbound, collected = tmp_path / "inbound", tmp_path / "course" / "submitted" / me / "ps01"
    (inbound / f"{me}+ps01+2026-01-01 10:00:00 UTC+a").mkdir(parents=True)
    collected.mkdir(parents=True)
    (line,) = recheck_collected(tmp_path / "course", inbound, "ps01")
    assert "has no readable timestamp.txt" in line
    assert (collected / STAMP_FILE).read_text().endswith(" UTC")
