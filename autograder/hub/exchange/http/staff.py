"""The grader account's side of the HTTP exchange: feedback pages staged for nbgrader, and what the autograde
service takes from the exchange and gives back to it.

    python -m autograder.hub.exchange.http.staff feedback ASSIGNMENT --course DIR

`feedback` puts each graded student's pages (`graded/A/feedback/STUDENT/*.html`), fresh, into
`feedback/STUDENT/A/` with the `timestamp.txt` of the submission they were made from (the service's time,
written by collect), where `nbgrader release_feedback` reads them; it prints the students as JSON.
"""

import argparse
import io
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from autograder.hub.exchange.arrival import STAMP_FILE, write_stamp
from autograder.hub.exchange.http.api import SUBMISSION_LIMITS, ServiceClient
from autograder.hub.exchange.http.archive import pack_files, unpack
from autograder.safe_copy import write_new


def stage_feedback(course: Path, assignment: str) -> list[str]:
    """Put each graded student's pages into feedback/STUDENT/ASSIGNMENT/ with their submission's time."""
    staged = []
    pages_root = course / "graded" / assignment / "feedback"
    for folder in sorted(p for p in pages_root.iterdir() if p.is_dir()) if pages_root.is_dir() else []:
        stamp = course / "submitted" / folder.name / assignment / STAMP_FILE
        pages = [p for p in sorted(folder.glob("*.html")) if p.is_file() and not p.is_symlink()]
        if not pages or not stamp.is_file() or stamp.is_symlink():
            continue  # not graded from a collected submission: nothing to give it back to
        mine = course / "feedback" / folder.name / assignment
        shutil.rmtree(mine, ignore_errors=True)
        mine.mkdir(parents=True)
        write_new(mine, STAMP_FILE, stamp.read_bytes().strip())
        for page in pages:
            write_new(mine, page.name, page.read_bytes())
        staged.append(folder.name)
    return staged


def take_submission(service: ServiceClient, student: str, assignment: str, timestamp: str, dest: Path,
                    skip: Callable[[str], bool] = lambda rel: False) -> None:
    """Unpack a stored submission into the new folder `dest` within the caps, stamped with the service time.

    Raise ServiceError when the service has none, ArchiveRefused when it does not unpack (dest removed then).
    """
    body = service.call("GET", f"submissions/{assignment}/{student}/{timestamp}")
    dest.mkdir(mode=0o700)
    try:
        unpack(io.BytesIO(body), dest, SUBMISSION_LIMITS)
    except Exception:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    for top, dirs, names in os.walk(dest, topdown=True):
        rel = Path(top).relative_to(dest)
        for name in [n for n in dirs if skip((rel / n).as_posix())]:
            dirs.remove(name)
            shutil.rmtree(Path(top, name))
        for name in [n for n in names if skip((rel / n).as_posix())]:
            Path(top, name).unlink()
    write_stamp(dest, timestamp, 0o600)


def give_back(service: ServiceClient, course: Path, student: str, assignment: str, timestamp: str,
              pages: dict[str, str], ids: dict[str, str] | None = None) -> None:
    """Give feedback pages back as nbgrader's release_feedback does: the course's feedback/ and the service.

    `ids` maps a page's notebook to the student's own name for it: the service keeps the page under that name,
    which the student's Assignments tab looks for.
    """
    mine = course / "feedback" / student / assignment
    shutil.rmtree(mine, ignore_errors=True)
    mine.mkdir(parents=True)
    write_new(mine, STAMP_FILE, timestamp.encode())
    for notebook, text in pages.items():
        write_new(mine, f"{notebook}.html", text.encode())
    body = pack_files({f"{(ids or {}).get(n, n)}.html": text.encode() for n, text in pages.items()})
    service.call("PUT", f"feedback/{assignment}/{student}/{timestamp}", body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="staff", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["feedback"])
    parser.add_argument("assignment")
    parser.add_argument("--course", required=True)
    args = parser.parse_args(argv)
    os.umask(0o077)
    print(json.dumps(stage_feedback(Path(args.course), args.assignment)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
