"""One person on a hub that runs: enrolled, given a role, and published to the running hub (`hub add-user`,
an LMS launch)."""


from dataclasses import replace

from autograder.hub.settings import (
    HubError,
    HubSettings,
)
from autograder.hub.setup import accounts
from autograder.hub.setup.hub_api import HubAPI
from autograder.hub.setup.install import configure
from autograder.hub.setup.roster import ROLES, Member, check_member, hub_groups, read_roster
from autograder.hub.setup.students import register_students


def enroll(s: HubSettings, member: Member) -> list[str]:
    """Add one person who is not on the roster yet: account, roster, configuration, gradebook; return what
    was done."""
    check_member(member, s.prefix)
    members = read_roster(s.paths.roster, s.prefix)
    if any(m.id == member.id for m in members):
        raise HubError(f"{member.id} is already on the roster ({s.paths.roster})")
    user = member.username(s.prefix)
    done = [f"account {user} " + ("exists" if accounts.lookup(user) else "created")]
    accounts.ensure_account(user, member.name, s.extra_group)
    members.append(member)
    configure(s, members)
    done.append("configuration rewritten")
    register_students(s, [member])
    return done


def set_role(s: HubSettings, member: Member) -> list[str]:
    """Give a person on the roster the role they have now: roster, configuration, gradebook; return what was
    done."""
    members = read_roster(s.paths.roster, s.prefix)
    old = {m.id: m.role for m in members}.get(member.id)
    configure(s, [replace(m, role=member.role) if m.id == member.id else m for m in members])
    register_students(s, [member])
    return [f"role {old} -> {member.role}"]


def add_user(s: HubSettings, member: Member) -> list[str]:
    """Add one person: account, roster, configuration, gradebook, and the running hub; return what was done.
    """
    accounts.require_root("hub add-user")
    return [*enroll(s, member), publish(s, member)]


def publish(s: HubSettings, member: Member) -> str:
    """Give the running hub the person's user and the course's groups of their role now; say what was done.

    Admin is not the command line's to give or take (the hub's API lets only admins change it): an LTI launch
    gives it, and on other hubs the configuration's admin_users at the hub's next start.
    """
    user = member.username(s.prefix)
    api = HubAPI.for_settings(s)
    if not api.up():
        return "the hub is not running: it picks the new user up when started"
    found = api.call("GET", f"/users/{user}")
    if found.status == 404 and api.call("POST", f"/users/{user}").status >= 300:
        raise HubError(f"the hub refused to add the user {user}")
    groups = set(found.body["groups"]) if found.status == 200 else set()
    wanted = hub_groups(member.role, s.course_id)
    course = {g for role in ROLES for g in hub_groups(role, s.course_id)}
    changes = [*(("POST", g) for g in wanted if g not in groups),
               *(("DELETE", g) for g in sorted(course & groups) if g not in wanted)]
    for method, group in changes:
        reply = api.call(method, f"/groups/{group}/users", {"users": [user]})
        if reply.status >= 300:
            raise HubError(f"the hub refused to change {user}'s group {group} (HTTP {reply.status})")
    said = "added to the running hub" if found.status == 404 else f"in the running hub's {member.role} groups"
    admin = found.status == 200 and found.body["admin"]
    if member.role == "instructor" and not admin:
        said += "; admin from " + ("their next launch" if s.lti else "the hub's next start")
    elif admin and member.role != "instructor":
        said += "; admin until their next launch (only an admin can take it away now)"
    return said
