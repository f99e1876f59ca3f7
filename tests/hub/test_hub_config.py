"""The hub's generated configuration, roster and refusals, without root or a running hub."""

import datetime
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from traitlets.config.loader import PyFileConfigLoader

from autograder.hub.exchange.commands.assignments import parse_due
from autograder.hub.exchange.commands.folder import FolderCommands
from autograder.hub.exchange.folder.tree import course_ignore
from autograder.hub.settings import HubError, HubSettings
from autograder.hub.setup.checks import check_root, check_settings, is_loopback
from autograder.hub.setup.install import write_course_config
from autograder.hub.setup.render import render_all, write_all
from autograder.hub.setup.roster import Member, read_roster, write_roster
from tests.hub_support import settings_of

ROOT = Path(__file__).resolve().parents[2]
MEMBERS = [Member("ann", "Ann Lee", "student"), Member("bob", "Bob Ray", "student"),
           Member("gil", "Gil Marker", "grader"), Member("ivy", "Ivy Teach", "instructor")]


def settings(tmp_path: Path, **changes) -> HubSettings:
    base = HubSettings(root=str(tmp_path / "root"), course_id="device-lab", course_source=str(ROOT),
                       prefix="dl-",
                       python=sys.executable, proxy=sys.executable)  # any executable stands in for the proxy
    return replace(base, **changes)


def load(path: Path):
    return PyFileConfigLoader(path.name, path=str(path.parent)).load_config()


def written(tmp_path: Path, **changes) -> HubSettings:
    s = settings(tmp_path, **changes)
    write_all(render_all(s, MEMBERS))
    s.paths.cli_token.write_text("t0ken\n")
    return s


def test_the_hub_config_loads_and_uses_pam_by_default(tmp_path: Path) -> None:
    s = written(tmp_path)
    c = load(s.paths.config)
    assert c.JupyterHub.authenticator_class == "pam"
    assert c.JupyterHub.spawner_class == "devicelab-limited"  # grader/pyproject.toml's entry point
    assert (c.Spawner.mem_limit, c.Spawner.cpu_limit) == (2048 * 2**20, 1.0)  # the defaults, enforced
    assert c.JupyterHub.bind_url == "http://127.0.0.1:8000/"
    assert c.Authenticator.allowed_users == ["dl-ann", "dl-bob", "dl-gil", "dl-grader", "dl-ivy"]
    assert c.Authenticator.admin_users == ["dl-ivy"]
    assert c.Spawner.environment["JUPYTER_CONFIG_PATH"] == str(s.paths.student_etc)
    assert s.paths.config.stat().st_mode & 0o777 == 0o600


def test_server_limits_are_the_setup_s_and_zero_means_none(tmp_path: Path) -> None:
    c = load(written(tmp_path, mem_limit_mib=512, cpu_limit=0.5).paths.config)
    assert (c.Spawner.mem_limit, c.Spawner.cpu_limit) == (512 * 2**20, 0.5)
    c = load(written(tmp_path / "none", mem_limit_mib=0, cpu_limit=0).paths.config)
    assert (c.Spawner.mem_limit, c.Spawner.cpu_limit) == (None, None)


def test_the_spawner_the_config_names_is_importable_from_the_course_the_config_adds():
    """The hub runs the config; it puts the course repository on sys.path for the spawner."""
    from jupyterhub.spawner import LocalProcessSpawner

    from autograder.hub.spawning.spawner import LimitedSpawner

    assert issubclass(LimitedSpawner, LocalProcessSpawner)


def test_groups_and_roles_follow_nbgrader(tmp_path: Path) -> None:
    c = load(written(tmp_path).paths.config)
    assert c.JupyterHub.load_groups == {"formgrade-device-lab": {"users": ["dl-gil", "dl-grader", "dl-ivy"]},
                                        "nbgrader-device-lab": {"users": ["dl-ann", "dl-bob", "dl-ivy"]}}
    roles = {r["name"]: r for r in c.JupyterHub.load_roles}
    assert "access:services!service=device-lab" in roles["formgrade-device-lab"]["scopes"]
    assert not any(scope.startswith("access:") for scope in roles["nbgrader-device-lab"]["scopes"])
    (service,) = [svc for svc in c.JupyterHub.services if svc["name"] == "device-lab"]
    assert service["user"] == "dl-grader" and service["cwd"].endswith("course")
    assert any(svc["name"] == "idle-culler" for svc in c.JupyterHub.services)
    assert {svc["name"]: svc for svc in c.JupyterHub.services}["devicelab-cli"]["api_token"] == "t0ken"


def test_the_grader_services_token_reads_the_graders_groups_and_its_own_service_only(tmp_path: Path) -> None:
    """Issue 49.1: every kernel and terminal of the grader service can read the service's token. It held
    admin:groups (anyone into formgrade-<course>: a grader) and read every user; now only what formgrader's
    exchange listing (the grader's own groups) and the Courses tab (this course's service) read."""
    c = load(written(tmp_path).paths.config)
    (role,) = [r for r in c.JupyterHub.load_roles if "device-lab" in r.get("services", [])]
    assert role == {"name": "device-lab-service", "services": ["device-lab"],
                    "scopes": ["read:users:groups!user=dl-grader", "list:services!service=device-lab",
                               "read:services!service=device-lab"]}


def test_the_course_config_is_the_repositorys_then_the_refusals_and_a_link_there_is_replaced(
        tmp_path: Path) -> None:
    """The course folder's nbgrader_config.py (tests/hub/test_hub_staff_execution.py: what it refuses). Setup
    rewrites it as root in a folder the grader owns: a link left at its name is replaced, never written
    through."""
    s = settings(tmp_path)
    s.paths.course.mkdir(parents=True)
    victim = tmp_path / "roots-file"
    victim.write_text("untouched")
    (s.paths.course / "nbgrader_config.py").symlink_to(victim)
    write_course_config(s)
    write_course_config(s)  # setup run again
    path = s.paths.course / "nbgrader_config.py"
    assert not path.is_symlink() and victim.read_text() == "untouched"
    text = path.read_text()
    assert text.startswith((ROOT / "nbgrader_config.py").read_text())
    assert text.count("Added by `hub setup`") == 1
    c = load(path)
    assert (c.CourseDirectory.course_id, c.Execute.timeout) == ("device-lab", 120)  # the course's own
    assert c.Autograde.autograde_preprocessors == ["autograder.hub.spawning.staff_execution.RefuseExecution"]
    assert c.StaffGuard.hub_root == s.root


def test_the_autograde_service_runs_as_the_grader_with_no_url_and_no_scopes(tmp_path: Path) -> None:
    s = written(tmp_path)
    c = load(s.paths.config)
    service = {svc["name"]: svc for svc in c.JupyterHub.services}["device-lab-autograde"]
    assert service["user"] == "dl-grader" and "url" not in service and "api_token" not in service
    assert service["command"] == [str(Path(sys.executable).parent / "devicelab-autograde"), "run", "--config",
                                  str(s.paths.grader_etc / "autograde.json")]
    assert settings_of(service["command"]) == {
        "course": str(s.paths.course), "exchange": str(s.paths.exchange), "course_id": s.course_id,
        "backend": "files", "http_exchange": "", "workers": False, "jobs": None, "once": False}
    assert "PYTHONPATH" not in service["environment"]
    assert not any("device-lab-autograde" in r.get("services", []) for r in c.JupyterHub.load_roles)


def test_no_culler_when_switched_off(tmp_path: Path) -> None:
    c = load(written(tmp_path, cull_idle_s=0).paths.config)
    assert not any(svc["name"] == "idle-culler" for svc in c.JupyterHub.services)
    assert not any(r["name"] == "idle-culler" for r in c.JupyterHub.load_roles)


def test_only_the_grader_service_may_be_framed(tmp_path: Path) -> None:
    s = written(tmp_path)
    grader = load(s.paths.grader_etc / "jupyter_server_config.py")
    student = load(s.paths.student_etc / "jupyter_server_config.py")
    csp = grader.ServerApp.tornado_settings["headers"]["Content-Security-Policy"]
    assert csp.startswith("frame-ancestors 'self';")  # then autograder.safe_html's rules
    assert "tornado_settings" not in student.ServerApp
    assert student.ServerApp.jpserver_extensions["nbgrader.server_extensions.formgrader"] is False
    assert grader.ServerApp.jpserver_extensions["nbgrader.server_extensions.formgrader"] is True


def test_no_server_starts_the_language_server_bridge_the_course_has_no_server_for(tmp_path: Path) -> None:
    s = written(tmp_path)
    for etc in (s.paths.grader_etc, s.paths.student_etc):
        assert load(etc / "jupyter_server_config.py").ServerApp.jpserver_extensions["jupyter_lsp"] is False


def test_nbgrader_configs_share_the_exchange(tmp_path: Path) -> None:
    s = written(tmp_path)
    for folder in (s.paths.student_etc, s.paths.grader_etc):
        c = load(folder / "nbgrader_config.py")
        assert c.Exchange.root == str(s.paths.exchange) and c.Exchange.path_includes_course is True
        assert c.Authenticator.plugin_class.__name__ == "JupyterHubAuthPlugin"
    assert load(s.paths.grader_etc / "nbgrader_config.py").CourseDirectory.course_id == "device-lab"
    assert "course_id" not in load(s.paths.student_etc / "nbgrader_config.py").CourseDirectory


@pytest.mark.parametrize("kind", ["native", "dummy"])
def test_other_authenticators(tmp_path: Path, kind: str) -> None:
    c = load(written(tmp_path, authenticator=kind, dummy_password="pw").paths.config)
    assert c.JupyterHub.authenticator_class == {"native": "nativeauthenticator.NativeAuthenticator",
                                               "dummy": "dummy"}[kind]


@pytest.mark.parametrize("ip", ["0.0.0.0", "192.168.1.5", "::"])
def test_dummy_is_refused_off_loopback(tmp_path: Path, ip: str) -> None:
    with pytest.raises(HubError, match="loopback"):
        check_settings(settings(tmp_path, authenticator="dummy", ip=ip))
    check_settings(settings(tmp_path, authenticator="pam", ip=ip))


def test_dummy_is_fine_on_loopback(tmp_path: Path) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    check_settings(settings(tmp_path, authenticator="dummy", ip="127.0.0.1"))


def test_ports_must_differ(tmp_path: Path) -> None:
    with pytest.raises(HubError, match="ports must differ"):
        check_settings(settings(tmp_path, port=8081))


def test_a_root_too_long_for_the_grader_kernels_sockets_is_refused(tmp_path: Path) -> None:
    deep = tmp_path / ("x" * 60)
    with pytest.raises(HubError, match="107 bytes"):
        check_root(settings(deep))
    check_root(settings(Path("/srv")))


def test_kernels_of_students_and_of_the_grader_service_talk_over_ipc(tmp_path: Path) -> None:
    """Issue 49.2: kernels on loopback TCP could be subscribed to by any account."""
    s = written(tmp_path)
    for etc in (s.paths.student_etc, s.paths.grader_etc):
        assert load(etc / "jupyter_server_config.py").KernelManager.transport == "ipc"
    assert load(s.paths.student_etc / "nbgrader_config.py").KernelManager.transport == "ipc"
    (service,) = [x for x in load(s.paths.config).JupyterHub.services if x["name"] == s.course_id]
    assert service["environment"]["JUPYTER_RUNTIME_DIR"] == str(s.paths.course / ".runtime")


def test_setup_needs_the_proxy(tmp_path: Path) -> None:
    for proxy in ("", str(tmp_path / "missing")):
        with pytest.raises(HubError, match="make hub-proxy"):
            check_settings(settings(tmp_path, proxy=proxy))


def test_roster(tmp_path: Path) -> None:
    path = tmp_path / "roster.csv"
    write_roster(path, MEMBERS)
    assert read_roster(path, "dl-") == MEMBERS
    path.write_text("id,name\nAnn,Ann Lee\n")
    assert read_roster(path, "") == [Member("ann", "Ann Lee", "student")]


@pytest.mark.parametrize(("text", "message"), [
    ("id,name,role\nann,A,teacher\n", "role 'teacher'"),
    ("id,name,role\nann,A,student\nann,B,student\n", "listed twice"),
    ("id,name,role\nann lee,A,student\n", "account name"),
    ("id,name,role\n" + "a" * 40 + ",A,student\n", "account name"),
    ("name,role\nA,student\n", "id,name,role"),
])
def test_bad_rosters_are_refused(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "roster.csv"
    path.write_text(text)
    with pytest.raises(HubError, match=message):
        read_roster(path, "")


def test_status_reads_the_exchange(tmp_path: Path) -> None:
    import os
    import pwd

    me = pwd.getpwuid(os.getuid()).pw_name  # the one account that owns these folders
    s = settings(tmp_path)
    s.paths.hub.mkdir(parents=True)
    write_roster(s.paths.roster, MEMBERS)
    inbound = s.paths.exchange / "device-lab" / "inbound"
    for name in (f"{me}+ps01+2026-01-01 10:00:00 UTC+abc", f"{me}+ps01+2026-01-02 10:00:00 UTC+def",
                 f"{me}+ps02+2026-01-03 10:00:00 UTC+ghi", "dl-bob+ps01+2026-01-01 10:00:00 UTC+jkl"):
        (inbound / name).mkdir(parents=True)
    (s.paths.course / "submitted" / me / "ps01").mkdir(parents=True)
    found = FolderCommands(s).status("ps01")
    rows = {r.student: r for r in found.handins}
    assert set(rows) == {"dl-ann", "dl-bob", me}
    assert rows[me].submitted == "2026-01-02 10:00:00 UTC" and rows[me].collected
    assert rows["dl-bob"].submitted is None  # a folder in bob's name that bob did not make is not his
    assert [b.name for b in found.skipped] == ["dl-bob+ps01+2026-01-01 10:00:00 UTC+jkl"]


def test_collect_keeps_nbgrader_submission_files(tmp_path: Path) -> None:
    s = settings(tmp_path)
    s.paths.course.mkdir(parents=True)
    (s.paths.course / "nbgrader_config.py").write_text(
        "c = get_config()\n"
        "c.CourseDirectory.ignore = ['*.txt', '*.py', '.ipynb_checkpoints', 'timestamp.txt']\n")
    skip = course_ignore(s.paths.course)
    assert [skip(p)
            for p in ("timestamp.txt", "submission_secret.txt", "a.py", "d/.ipynb_checkpoints/x")] == [
        False, False, True, True]


def test_commands_say_when_there_is_no_hub(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "autograder", "hub", "status", "ps01", "--root",
                           str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 2 and "hub setup" in done.stderr


def test_a_due_date_is_read_as_nbgrader_reads_it_and_a_bad_one_is_refused_before_the_release(
    tmp_path: Path) -> None:
    assert parse_due("2026-12-01 17:00:00 UTC") == datetime.datetime(2026, 12, 1, 17, 0)
    assert parse_due("2026-12-01T17:00:00-05:00") == datetime.datetime(2026, 12, 1, 22, 0)
    assert parse_due("2026-12-01 17:00") == datetime.datetime(2026, 12, 1, 17, 0)  # no zone: UTC
    with pytest.raises(HubError, match="cannot read the due date 'next friday'"):
        # refused before anything is run
        FolderCommands(settings(tmp_path)).release("ps01-tensors-and-devices", due="next friday")


def test_the_students_csv_for_nbgrader_keeps_names_with_commas_and_quotes_whole() -> None:
    import csv
    import io

    from autograder.hub.setup.roster import Member
    from autograder.hub.setup.students import write_students_csv

    handle = io.StringIO()
    write_students_csv(handle,
                       [Member("ann", 'Ann "Annie" Lee, Jr.', "student"), Member("bob", "Bob", "student")],
                       "dl-")
    rows = list(csv.DictReader(io.StringIO(handle.getvalue())))  # as nbgrader's `db student import` reads it
    assert [r["id"] for r in rows] == ["dl-ann", "dl-bob"]
    assert rows[0]["first_name"] + " " + rows[0]["last_name"] == 'Ann "Annie" Lee, Jr.'


def test_students_can_read_their_config_whatever_umask_setup_inherits(tmp_path: Path) -> None:
    """A `hub setup` started from a shell (or a test) with umask 077 still makes the students' config folders
    readable: without them JupyterLab shows the students formgrader's panels."""
    import os
    import stat

    before = os.umask(0o077)
    try:
        s = written(tmp_path)
    finally:
        os.umask(before)
    for folder in (s.paths.student_etc, s.paths.student_etc / "labconfig"):
        mode = stat.S_IMODE(folder.stat().st_mode)
        assert mode & 0o005 == 0o005, f"{folder} is {mode:o}: students cannot read it"


NEWS = "@jupyterlab/apputils-extension:announcements"  # asks about Jupyter's news, fetches it, checks updates


def test_no_jupyterlab_of_the_hub_or_of_make_lab_asks_about_news(tmp_path: Path, monkeypatch) -> None:
    """JupyterLab asks each new user whether to fetch Jupyter's news; on a loaded machine the question came
    late, over a notebook a student was typing in. Its plugin (the one JupyterLab's documentation says to
    disable) is off in every JupyterLab the hub starts and in `make lab`'s, in the page JupyterLab serves."""
    from jupyter_core.paths import jupyter_path
    from jupyterlab.commands import get_app_dir
    from jupyterlab_server.config import get_page_config

    s = written(tmp_path)
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "no-user-config"))  # not the developer's own
    for folder in (s.paths.student_etc, s.paths.grader_etc, ROOT / "etc" / "jupyter" / "student"):
        monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(folder))  # as the hub's spawner and `make lab` set it
        assert NEWS in get_page_config(jupyter_path("labextensions"))["disabledExtensions"], folder
    # ... and that is still the plugin's name in this JupyterLab (renamed, its question would come back)
    bundles = (Path(get_app_dir()) / "static").glob("jlab_core*.js")
    assert any(f'id:"{NEWS}"' in bundle.read_text(errors="replace") for bundle in bundles)


def test_a_students_server_port_is_held_for_it_from_its_choice_until_it_stops() -> None:
    """JupyterHub chose a server's port and let it go; any process could take it in the seconds before the
    boxed server bound it, and then the server did not start. The spawner holds each port it chooses: no one
    else binds it, the server (tornado, as jupyterhub-singleuser binds) does, and each start holds a new one.
    """
    import socket

    from tornado.netutil import bind_sockets

    from autograder.hub.spawning.spawner import LimitedSpawner

    spawner = LimitedSpawner()
    spawner._hold_port()
    first, held = spawner.port, spawner._held
    with socket.socket() as other, pytest.raises(OSError):
        other.bind(("127.0.0.1", first))
    listening = bind_sockets(first, "127.0.0.1")  # the server's own bind, while the hub holds the port
    for sock in listening:
        sock.close()
    spawner._hold_port()  # its next start (after a stop): a new port, the old one let go
    assert spawner.port != first and held.fileno() == -1
    held = spawner._held
    spawner._release_port()  # it stopped
    assert spawner._held is None and held.fileno() == -1
    configured = LimitedSpawner(port=first)  # c.Spawner.port: the configuration's choice stands
    configured._hold_port()
    assert configured.port == first and configured._held is None


def test_each_setup_setting_is_declared_once_with_its_flag_default_help_and_check(tmp_path: Path) -> None:
    """`hub setup`'s options are made from HubSettings' fields: the parser holds no default of its own
    (a setting not given comes from HubSettings, or from the last setup where it is kept), its help states
    the field's default, and a bad value is refused by the field's own check."""
    import argparse

    from autograder.hub.cli import add_arguments
    from autograder.options import options, problems

    hub = argparse.ArgumentParser()
    add_arguments(hub, ROOT)
    setup = next(a for a in hub._subparsers._group_actions[0].choices.values() if a.prog.endswith("setup"))
    flags = {a.dest: a for a in setup._actions}
    declared = options(HubSettings)
    assert {f.name for f in declared} <= set(flags)
    for f in declared:
        assert flags[f.name].default is None, f.name  # no second default in the parser
        if f.default not in ("",):
            assert str(f.default) in flags[f.name].help, f.name
    assert setup.parse_args(["--hub-port", "8090"]).hub_port == 8090
    good = settings(tmp_path)
    assert problems(good) == []
    assert problems(replace(good, hub_port=70000, mem_limit_mib=-1)) == [
        "--hub-port 70000: a port is 1 to 65535", "--mem-limit -1: give 0 or more"]
    with pytest.raises(HubError, match="--server-box 'chroot': choose bwrap, none"):
        check_settings(replace(good, server_box="chroot"))
