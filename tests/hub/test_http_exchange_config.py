"""The generated configuration of a hub with `--exchange http`: the service, its scopes, the classes nbgrader
takes, and no shared exchange folder; and the file-system exchange's, unchanged, by default."""

import sys
from dataclasses import replace
from pathlib import Path

import pytest
from nbgrader.exchange import ExchangeFactory
from traitlets.config.loader import PyFileConfigLoader

from autograder.hub.exchange.http import client
from autograder.hub.exchange.http.api import STAFF_SCOPE
from autograder.hub.settings import HubError, HubSettings
from autograder.hub.setup.checks import check_settings
from autograder.hub.setup.render import render_all, write_all
from autograder.hub.setup.roster import Member
from tests.hub_support import settings_of

ROOT = Path(__file__).resolve().parents[2]
MEMBERS = [Member("ann", "Ann Lee", "student"), Member("ivy", "Ivy Teach", "instructor")]
ACCESS = "access:services!service=device-lab-exchange"


def written(tmp_path: Path, **changes) -> HubSettings:
    s = replace(HubSettings(root=str(tmp_path / "root"), course_id="device-lab", course_source=str(ROOT),
                            prefix="dl-", python=sys.executable, proxy=sys.executable), **changes)
    write_all(render_all(s, MEMBERS))
    s.paths.cli_token.write_text("t0ken\n")
    return s


def load(path: Path):
    return PyFileConfigLoader(path.name, path=str(path.parent)).load_config()


def test_the_http_exchange_is_a_service_of_the_grader_and_no_folder_is_shared(tmp_path: Path) -> None:
    s = written(tmp_path, exchange="http", exchange_port=9123)
    c = load(s.paths.config)
    (service,) = [svc for svc in c.JupyterHub.services if svc["name"] == "device-lab-exchange"]
    assert service["user"] == "dl-grader" and service["url"] == "http://127.0.0.1:9123"
    assert service["command"] == [str(Path(sys.executable).parent / "devicelab-exchange-service"), "--config",
                                  str(s.paths.grader_etc / "exchange-service.json")]
    assert settings_of(service["command"]) == {"store": str(s.paths.exchange_store), "lease_s": s.lease_s,
                                               "hand_out_when_told": False, "lease_database": ""}
    (autograde,) = [svc for svc in c.JupyterHub.services if svc["name"] == "device-lab-autograde"]
    told = settings_of(autograde["command"])
    assert (told["http_exchange"], told["course_id"], told["exchange"]) == (
        "http://127.0.0.1:9123/services/device-lab-exchange/", "device-lab", str(s.paths.exchange_store))
    assert c.LimitedSpawner.box_shared == []
    assert str(s.paths.exchange) not in s.paths.config.read_text()
    assert "PYTHONPATH" not in c.Spawner.environment  # the exchange's client classes are installed
    assert STAFF_SCOPE in c.JupyterHub.custom_scopes
    roles = {r["name"]: set(r["scopes"]) for r in c.JupyterHub.load_roles}
    assert {ACCESS, STAFF_SCOPE} <= roles["formgrade-device-lab"]
    assert ACCESS in roles["nbgrader-device-lab"] and STAFF_SCOPE not in roles["nbgrader-device-lab"]
    assert {ACCESS, STAFF_SCOPE} <= roles["device-lab-service"]  # formgrader's Collect, with its own token
    assert set(roles["device-lab-autograde"]) == {ACCESS, STAFF_SCOPE}
    assert not any(STAFF_SCOPE in r or ACCESS in r for n, r in roles.items() if n.startswith("devicelab-cli"))


@pytest.mark.parametrize("who", ["student", "grader"])
def test_nbgrader_takes_the_http_classes(tmp_path: Path, who: str) -> None:
    s = written(tmp_path, exchange="http", exchange_port=9123)
    c = load((s.paths.student_etc if who == "student" else s.paths.grader_etc) / "nbgrader_config.py")
    factory = ExchangeFactory(config=c)
    assert (factory.submit, factory.fetch_assignment, factory.fetch_feedback, factory.list, factory.collect,
            factory.release_assignment, factory.release_feedback) == (
        client.HttpSubmit, client.HttpFetchAssignment, client.HttpFetchFeedback, client.HttpList,
        client.HttpCollect, client.HttpReleaseAssignment, client.HttpReleaseFeedback)
    assert c.HttpExchange.url == "http://127.0.0.1:9123/services/device-lab-exchange/"


def test_the_files_exchange_stays_the_default_and_as_it_was(tmp_path: Path) -> None:
    s = written(tmp_path)
    assert s.exchange == "files"
    c = load(s.paths.config)
    assert c.LimitedSpawner.box_shared == [str(s.paths.exchange)]
    assert "PYTHONPATH" not in c.Spawner.environment
    assert [svc["name"] for svc in c.JupyterHub.services if "exchange" in svc["name"]] == []
    assert "device-lab-autograde" not in {r["name"] for r in c.JupyterHub.load_roles}  # no API scopes
    c = load(s.paths.config)
    autograde = {svc["name"]: svc for svc in c.JupyterHub.services}["device-lab-autograde"]
    assert settings_of(autograde["command"])["http_exchange"] == ""
    grader = load(s.paths.grader_etc / "nbgrader_config.py")
    assert grader.ExchangeFactory.collect == "autograder.hub.exchange.folder.formgrader.SafeCollect"
    assert "ExchangeFactory" not in load(s.paths.student_etc / "nbgrader_config.py")


def test_the_exchange_service_needs_a_port_of_its_own(tmp_path: Path) -> None:
    s = written(tmp_path, exchange="http", exchange_port=9999)  # the formgrader service's
    with pytest.raises(HubError, match="exchange service 9999"):
        check_settings(s)
    with pytest.raises(HubError, match="--exchange 'ftp': choose files, http"):
        check_settings(replace(s, exchange="ftp"))


def test_setup_again_keeps_the_exchange_it_was_given(tmp_path: Path) -> None:
    from autograder.hub.cli import _last_setup

    first = _last_setup(tmp_path / "none")
    assert (first.exchange, first.exchange_port) == ("files", 9998)
    s = written(tmp_path, exchange="http", exchange_port=9123)
    s.save()
    again = _last_setup(Path(s.root))
    assert (again.exchange, again.exchange_port) == ("http", 9123)
