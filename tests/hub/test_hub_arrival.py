"""A submission's time: the one it states when the file system agrees, else when its files were written."""

import datetime
from pathlib import Path

from autograder.hub.exchange.arrival import (
    STAMP_FILE,
    TOLERANCE,
    Arrival,
    arrival,
    nbgrader_time,
    write_stamp,
)

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
    for claimed, said in ((nbgrader_time(NOW - TOLERANCE - datetime.timedelta(seconds=1)),
                           "claims 2026-11-24 11:57"),
                          (None, "has no readable timestamp.txt"), ("yesterday-ish", "claims yesterday-ish")):
        seen = Arrival(claimed, NOW)
        assert not seen.trusted and seen.timestamp == "2026-11-24 12:00:00.000000 UTC"
        assert said in seen.note() and "graded as submitted at 2026-11-24 12:00:00.000000 UTC" in seen.note()


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)


def test_reading_a_folder_takes_the_newest_change_of_any_file_in_it(tmp_path: Path) -> None:
    now = utc_now()
    folder = submission(tmp_path, nbgrader_time(now))
    (folder / "deep" / "er").mkdir(parents=True)
    last = utc_now()
    (folder / "deep" / "er" / "late.txt").write_text("written now")
    seen = arrival(folder)
    after = utc_now()
    assert seen.claimed == nbgrader_time(now) and seen.trusted
    # the last write's time, however slowly the lines ran: between the clock's reads around it (less a tick
    # of the coarser clock the file system stamps changes with)
    assert last - datetime.timedelta(seconds=1) <= seen.written <= after


def test_a_linked_or_undecodable_timestamp_is_no_timestamp(tmp_path: Path) -> None:
    elsewhere = tmp_path / "stamp.txt"
    elsewhere.write_text(nbgrader_time(NOW))
    folder = submission(tmp_path, None)
    (folder / STAMP_FILE).symlink_to(elsewhere)
    assert arrival(folder).claimed is None
    (folder / STAMP_FILE).unlink()
    (folder / STAMP_FILE).write_bytes(b"\xff\xfe2026")
    assert arrival(folder).claimed is None and not arrival(folder).trusted


def test_the_exchanges_time_replaces_whatever_a_student_named_timestamp_txt(tmp_path: Path):
    """A file, a link (never followed) or a folder with files in it: each gives way to the exchange's time
    (issue 61: a folder stopped the autograde batch and `hub collect`)."""
    outside = tmp_path / "outside.txt"
    outside.write_text("the instructor's")
    planted = {"file": lambda p: p.write_text("1999-01-01 00:00:00"),
               "link": lambda p: p.symlink_to(outside),
               "folder": lambda p: (p.mkdir(), (p / "why").write_text("x"), (p / "deeper").mkdir())}
    for kind, plant in planted.items():
        folder = tmp_path / kind
        folder.mkdir()
        plant(folder / STAMP_FILE)
        write_stamp(folder, "2026-12-02 01:00:00.000000 UTC")
        stamp = folder / STAMP_FILE
        assert stamp.is_file() and not stamp.is_symlink(), kind
        assert stamp.read_text() == "2026-12-02 01:00:00.000000 UTC", kind
    assert outside.read_text() == "the instructor's", "the link was replaced, never written through"
