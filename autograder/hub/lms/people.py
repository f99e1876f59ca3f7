"""Who is who: each LMS person, (issuer, deployment, sub), and the one hub account made for them.

The ledger is a sqlite file in the hub's own folder (root only), filled when the hub makes a person's account
(at their first launch, or from the LMS's roster). The grader's platform.json keeps a copy (account -> sub)
for grade passback; the grader account can write that copy, so it is never read to decide who someone is.
"""

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import insert, select

from autograder.hub.lms.launch import LaunchRefused
from autograder.hub.lms.names import claimed_name, label
from autograder.hub.stores.models import PersonRow
from autograder.hub.stores.tables import Tables


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
    """The ledger of who is who (made root-only on first use; its table: stores/models.py's PersonRow)."""

    def __init__(self, path: Path) -> None:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600))
        self.store = Tables(f"sqlite:///{path}", "people")

    def close(self) -> None:
        """Close the file."""
        self.store.close()

    def account_of(self, key: LmsKey, db=None) -> str | None:
        """Return the person's account, or None before the hub made one."""
        query = select(PersonRow.account).where(PersonRow.issuer == key.issuer,
                                                PersonRow.deployment_id == key.deployment_id,
                                                PersonRow.sub == key.sub)
        return self._first(query, db)

    def owner_of(self, account: str, db=None) -> LmsKey | None:
        """Return the person the account was made for, or None."""
        query = select(PersonRow.issuer, PersonRow.deployment_id, PersonRow.sub).where(
            PersonRow.account == account)
        found = self._first(query, db, whole=True)
        return LmsKey(*found) if found else None

    def accounts(self) -> set[str]:
        """Return every account made for an LMS person."""
        with self.store.read() as db:
            return set(db.scalars(select(PersonRow.account)))

    def bind(self, key: LmsKey, account: str) -> None:
        """Record that the account is the person's; refuse another person's account or a second account."""
        with self.store.write() as db:
            mine, owner = self.account_of(key, db), self.owner_of(account, db)
            if mine is not None and mine != account:
                raise LaunchRefused(f"you already have the account {mine} on this hub")
            if owner is not None and owner != key:
                raise LaunchRefused(f"the account {account} belongs to another person of the LMS")
            if mine is None:
                db.execute(insert(PersonRow).values(issuer=key.issuer, deployment_id=key.deployment_id,
                                                    sub=key.sub, account=account))

    def adopt(self, legacy: dict[str, str], issuer: str, deployment_id: str) -> int:
        """Take the account -> sub map of a hub set up before this ledger (platform.json), once: only into an
        empty ledger. Return how many people were taken."""
        with self.store.write() as db:
            if db.execute(select(PersonRow.account).limit(1)).first() is not None:
                return 0
            seen: set[str] = set()
            for account, sub in sorted(legacy.items()):  # accounts are a map's keys: each once
                if sub and sub not in seen:
                    seen.add(sub)
                    db.execute(insert(PersonRow).values(issuer=issuer, deployment_id=deployment_id, sub=sub,
                                                        account=account))
        return len(seen)

    def _first(self, query, db, whole: bool = False):
        if db is None:
            with self.store.read() as conn:
                return self._first(query, conn, whole)
        found = db.execute(query).first()
        return None if found is None else (tuple(found) if whole else found[0])
