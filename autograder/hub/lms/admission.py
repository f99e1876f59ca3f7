"""The hub account of an LMS person: found by who they are in the LMS, made by the hub, never an existing one.

A person's first arrival (a launch, or `hub roster --from-lms`) makes a new account under the hub's prefix,
named from their claim unless that name folds together with any account or roster name there is; then it is
theirs (people.py), whatever their claims say later. Every arrival gives them the role the course gives
them now (roster, configuration, gradebook). Root runs this: the hub on a launch, `hub roster --from-lms`.
"""

import grp
import pwd
from collections.abc import Callable, Collection
from dataclasses import dataclass

from filelock import FileLock

from autograder.hub.lms.launch import Launch, LaunchRefused
from autograder.hub.lms.names import account_name
from autograder.hub.lms.people import LmsKey, LmsPerson, People
from autograder.hub.lms.tool import ToolFiles, prepare, remember
from autograder.hub.settings import HubSettings
from autograder.hub.setup import accounts
from autograder.hub.setup.members import enroll, set_role
from autograder.hub.setup.roster import Member, read_roster


@dataclass(frozen=True)
class Admitted:
    """A person's account as they arrived: the roster member, the account and what was done."""

    member: Member
    user: str
    done: list[str]  # empty when nothing changed


def exists(name: str) -> bool:
    """Return whether there is a Unix account of this name."""
    return accounts.lookup(name) is not None


def account_for(people: People, key: LmsKey, base: str, prefix: str, taken: Collection[str],
                exists: Callable[[str], bool] = exists) -> tuple[str, bool]:
    """Return the person's account and whether it was given now: the one made for them, else a new name that
    folds together with no `taken` one and names no existing account (bound to them at once)."""
    known = people.account_of(key)
    if known is not None:
        return known, False
    taken = set(taken)
    for _ in range(2):  # an account a directory service has but does not list: the tagged name
        user = account_name(prefix, base, key.tag, taken)
        if not exists(user):
            people.bind(key, user)
            return user, True
        taken.add(user)
    raise LaunchRefused("there is no account name left for you on this hub; tell your instructor")


def check_the_hubs(user: str, grader: str, prefix: str) -> None:
    """Refuse an account the hub cannot have made for an LMS person (the grader, a system or staff account).
    """
    found = accounts.lookup(user)
    why = "the course's grader account" if user == grader else (
        accounts.not_the_hubs(found, prefix, accounts.uid_range()) if found else "")
    if why:
        raise LaunchRefused(f"the account {user} is not one this hub made for you ({why}); tell your "
                            "instructor")


def admit(s: HubSettings, person: LmsPerson, launch: Launch | None = None) -> Admitted:
    """Return the person's account with their role now, made on their first arrival; never anyone else's."""
    if not s.prefix:
        raise LaunchRefused("this hub names accounts without a prefix; the instructor must run hub setup "
                            "again with --prefix")
    with FileLock(f"{s.paths.lti_people}.lock", timeout=120):
        members = {m.id: m for m in read_roster(s.paths.roster, s.prefix)}
        people = ledger(s)
        try:
            taken = {*(entry.pw_name for entry in pwd.getpwall()), s.grader, *people.accounts(),
                     *(entry.gr_name for entry in grp.getgrall()),  # useradd makes a group of the name too
                     *(m.username(s.prefix) for m in members.values())}
            user, _ = account_for(people, person.key, person.base, s.prefix, taken)
        finally:
            people.close()
        check_the_hubs(user, s.grader, s.prefix)
        member = Member(user[len(s.prefix):], person.name, person.role)
        listed = members.get(member.id)
        if listed is None:
            done = enroll(s, member)
        elif listed.role != member.role:
            done, member = set_role(s, member), Member(member.id, listed.name, member.role)
        else:
            done, member = [], listed
        grader = accounts.lookup(s.grader)
        remember(ToolFiles(s.paths.lti), {user: person.key.sub}, launch,
                 (grader.uid, grader.gid) if grader else None)
    return Admitted(member, user, done)


def prepare_lms(s: HubSettings) -> None:
    """Make the hub's side of the LMS (`hub setup`): the ledger of who is who, and the tool's keys and the
    platform's settings in the grader's LTI folder."""
    assert s.lti is not None
    grader = accounts.lookup(s.grader)
    assert grader is not None
    ledger(s).close()  # made now; a hub set up before there was one: who launched is who they were
    prepare(ToolFiles(s.paths.lti), s.lti, (grader.uid, grader.gid))


def ledger(s: HubSettings) -> People:
    """Open the hub's ledger of who is who; a new one first takes the people an older hub knew (the account ->
    sub map of platform.json, which launches filled before there was a ledger), as they are."""
    fresh = not s.paths.lti_people.exists()
    people = People(s.paths.lti_people)
    if fresh and s.lti is not None:
        try:
            legacy = ToolFiles(s.paths.lti).read_platform().people
        except FileNotFoundError:
            legacy = {}
        people.adopt(legacy, s.lti.issuer, s.lti.deployment_id)
    return people
