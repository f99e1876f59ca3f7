"""Who is who: each LMS person, (issuer, deployment, sub), and the one hub account made for them.

The ledger is a sqlite file in the hub's own folder (root only), filled when the hub makes a person's account
(at their first launch, or from the LMS's roster). The grader's platform.json keeps a copy (account -> sub)
for grade passback; the grader account can write that copy, so it is never read to decide who someone is.
"""

import hashlib
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autograder.hub.lms.launch import LaunchRefused
from autograder.hub.lms.names import claimed_name, label

SCHEMA = """
CREATE TABLE IF NOT EXISTS people (
    issuer TEXT NOT NULL,
    deployment_id TEXT NOT NULL,
    sub TEXT NOT NULL,
    account TEXT NOT NULL UNIQUE,
    PRIMARY KEY (issuer, deployment_id, sub)
);
"""


@dataclass(frozen=True)
class LmsKey:
    """A person as the LMS knows them: its stable id (sub) under the platform's issuer and the deployment."""

    issuer: str
    deployment_id: str
    sub: str

    @property
    def tag(self) -> str:
        """Return a short stable hash of the person (it tells apart two people whose names collide)."""
        return hashlib.sha256(f"{self.issuer}\n{self.deployment_id}\n{self.sub}".encode()).hexdigest()[:8]


@dataclass(frozen=True)
class LmsPerson:
    """An LMS person arriving at the hub (from a launch, or from the LMS's roster) with their role now."""

    key: LmsKey
    base: str  # the name their naming claim suggests (names.claimed_name): a suggestion only
    name: str  # their display name: a label only
    role: str  # student, grader or instructor, as the course gives it now

    @classmethod
    def of(cls, key: LmsKey, claims: dict[str, Any], role: str, claim: str) -> "LmsPerson":
        """Return the person of these claims (raises LaunchRefused without the naming claim)."""
        base = claimed_name(claims, claim)
        return cls(key, base, label(str(claims.get("name") or ""), base), role)


class People:
    """The ledger of who is who (made root-only on first use)."""

    def __init__(self, path: Path) -> None:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600))
        self.db = sqlite3.connect(path, timeout=30, isolation_level=None)
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        """Close the file."""
        self.db.close()

    def account_of(self, key: LmsKey) -> str | None:
        """Return the person's account, or None before the hub made one."""
        found = self.db.execute("SELECT account FROM people WHERE issuer=? AND deployment_id=? AND sub=?",
                                (key.issuer, key.deployment_id, key.sub)).fetchone()
        return found[0] if found else None

    def owner_of(self, account: str) -> LmsKey | None:
        """Return the person the account was made for, or None."""
        found = self.db.execute("SELECT issuer, deployment_id, sub FROM people WHERE account=?",
                                (account,)).fetchone()
        return LmsKey(*found) if found else None

    def accounts(self) -> set[str]:
        """Return every account made for an LMS person."""
        return {row[0] for row in self.db.execute("SELECT account FROM people")}

    def bind(self, key: LmsKey, account: str) -> None:
        """Record that the account is the person's; refuse another person's account or a second account."""
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            mine, owner = self.account_of(key), self.owner_of(account)
            if mine is not None and mine != account:
                raise LaunchRefused(f"you already have the account {mine} on this hub")
            if owner is not None and owner != key:
                raise LaunchRefused(f"the account {account} belongs to another person of the LMS")
            if mine is None:
                self.db.execute("INSERT INTO people VALUES (?, ?, ?, ?)",
                                (key.issuer, key.deployment_id, key.sub, account))

    def adopt(self, legacy: dict[str, str], issuer: str, deployment_id: str) -> int:
        """Take the account -> sub map of a hub set up before this ledger (platform.json), once: only into an
        empty ledger. Return how many people were taken."""
        if self.accounts():
            return 0
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            seen: set[str] = set()
            for account, sub in sorted(legacy.items()):
                if sub and sub not in seen:
                    seen.add(sub)
                    self.db.execute("INSERT OR IGNORE INTO people VALUES (?, ?, ?, ?)",
                                    (issuer, deployment_id, sub, account))
        return len(seen)
