"""The class list: who is on the hub, with which role, under which Unix account."""

import csv
import re
from dataclasses import dataclass
from pathlib import Path

from autograder.csv_cells import restored, write_rows
from autograder.hub.settings import HubError

ROLES = ("student", "grader", "instructor")
# The hub groups of each role: nbgrader-<course> sees the assignments, formgrade-<course> reaches formgrader.
GROUP_KINDS = {"student": ("nbgrader",), "grader": ("formgrade",), "instructor": ("nbgrader", "formgrade")}
# A Unix login name that is also a JupyterHub user name and an nbgrader student id.
NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


@dataclass(frozen=True)
class Member:
    """One person on the hub."""

    id: str
    name: str
    role: str

    def username(self, prefix: str) -> str:
        """Return the Unix account and hub user name (the prefix, then the id)."""
        return f"{prefix}{self.id}"

    @property
    def first_last(self) -> tuple[str, str]:
        """Return the name split into first and last name, as nbgrader's gradebook keeps it."""
        first, _, last = self.name.strip().partition(" ")
        return first, last


def hub_groups(role: str, course_id: str) -> list[str]:
    """Return the hub groups a member of this role belongs to."""
    return [f"{kind}-{course_id}" for kind in GROUP_KINDS[role]]


def check_member(member: Member, prefix: str) -> Member:
    """Return the member if the id, role and account name are usable; else raise HubError."""
    if member.role not in ROLES:
        raise HubError(f"{member.id}: role {member.role!r} is not one of {', '.join(ROLES)}")
    user = member.username(prefix)
    if not NAME.match(user):
        raise HubError(f"{member.id}: account name {user!r} must be lowercase letters, digits, '-' or '_', "
                       "start with a letter, and have at most 32 characters")
    if user.endswith("grader") and member.id == "grader":
        raise HubError("the id 'grader' is taken by the shared grader account")
    return member


def read_roster(path: Path, prefix: str) -> list[Member]:
    """Read a roster CSV with columns id, name, role (role defaults to student)."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            rows = list(map(restored, csv.DictReader(handle)))
    except OSError as exc:
        raise HubError(f"cannot read the roster {path}: {exc.strerror}") from None
    if rows and "id" not in rows[0]:
        raise HubError(f"{path}: the first line must name the columns: id,name,role")
    members, seen = [], set()
    for number, row in enumerate(rows, start=2):
        ident = (row.get("id") or "").strip().lower()
        if not ident:
            raise HubError(f"{path}, line {number}: no id")
        if ident in seen:
            raise HubError(f"{path}, line {number}: {ident} is listed twice")
        seen.add(ident)
        member = Member(ident, (row.get("name") or ident).strip(),
                        (row.get("role") or "student").strip().lower())
        members.append(check_member(member, prefix))
    return members


def write_roster(path: Path, members: list[Member]) -> None:
    """Write the roster CSV (id,name,role), spreadsheet-safe: read_roster gives the same members back."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        write_rows(handle, [["id", "name", "role"], *([m.id, m.name, m.role] for m in members)])
