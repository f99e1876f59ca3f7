"""The generated configuration of a hub with `--grading-workers N`: N worker services of the grader account,
each with its own course copy, the exchange's staff scope and the hub's sandbox; none by default; refused
without the HTTP exchange."""

import argparse
import sys
import urllib.parse
from dataclasses import replace
from pathlib import Path

import pytest
from traitlets.config.loader import PyFileConfigLoader

from autograder.hub.exchange.http.api import STAFF_SCOPE
from autograder.hub.settings import HubError, HubSettings
from autograder.hub.setup.checks import check_settings
from autograder.hub.setup.install import copy_course
from autograder.hub.setup.render import render_all, write_all
from autograder.hub.setup.roster import Member
from tests.hub_support import settings_of

ROOT = Path(__file__).resolve().parents[2]
MEMBERS = [Member("ann", "Ann Lee", "student"), Member("ivy", "Ivy Teach", "instructor")]
ACCESS = "access:services!service=device-lab-exchange"
URL = "http://127.0.0.1:9123/services/device-lab-exchange/"


def settings(tmp_path: Path, **changes) -> HubSettings:
    return replace(HubSettings(root=str(tmp_path / "root"), course_id="device-lab", course_source=str(ROOT),
                               prefix="dl-", python=sys.executable, proxy=sys.executable,
                               exchange="http", exchange_port=9123), **changes)


def config(s: HubSettings):
    write_all(render_all(s, MEMBERS))
    s.paths.cli_token.write_text("t0ken\n")
    return PyFileConfigLoader(s.paths.config.name, path=str(s.paths.config.parent)).load_config()


def services(c) -> dict[str, dict]:
    return {svc["name"]: svc for svc in c.JupyterHub.services}


def workers(c) -> dict[str, dict]:
    return {svc["name"]: svc for svc in c.JupyterHub.services if "-worker-" in svc["name"]}


def test_each_worker_is_a_service_of_the_grader_with_its_own_course_copy_and_the_hubs_sandbox(
        tmp_path: Path) -> None:
    s = settings(tmp_path, grading_workers=2, worker_sandbox="unshare")
    found = workers(config(s))
    assert sorted(found) == ["device-lab-worker-1", "device-lab-worker-2"]
    courses = set()
    for name, svc in found.items():
        k = int(name.rsplit("-", 1)[1])
        assert svc["user"] == "dl-grader" and "url" not in svc and "api_token" not in svc
        assert svc["command"] == [str(Path(sys.executable).parent / "devicelab-grading-worker"), "--config",
                                  str(s.paths.grader_etc / f"worker-{k}.json")]
        told = settings_of(svc["command"])
        assert (told["url"], told["course"]) == (URL, str(s.paths.worker_course(k)))
        assert told["sandbox"] == "unshare"
        assert svc["cwd"] == str(s.paths.worker_course(k)) and "PYTHONPATH" not in svc["environment"]
        courses.add(svc["cwd"])
    assert len(courses) == 2 and all(Path(c).is_relative_to(s.paths.course) for c in courses)


def test_with_workers_the_autograde_service_records_their_results_instead_of_grading(tmp_path: Path) -> None:
    def autograde(c) -> list[str]:
        return settings_of(services(c)["device-lab-autograde"]["command"])

    assert autograde(config(settings(tmp_path, grading_workers=2)))["workers"] is True
    assert autograde(config(settings(tmp_path)))["workers"] is False


def test_with_workers_the_exchange_hands_out_nothing_until_the_autograde_service_says_what(
        tmp_path: Path) -> None:
    def exchange(c) -> list[str]:
        return settings_of(services(c)["device-lab-exchange"]["command"])

    told = exchange(config(settings(tmp_path, grading_workers=1, lease_s=45.0)))
    assert told["hand_out_when_told"] is True and told["lease_s"] == 45
    assert exchange(config(settings(tmp_path)))["hand_out_when_told"] is False


def test_with_workers_the_exchange_keeps_its_leases_in_the_hubs_database_or_a_file_of_its_store(
        tmp_path: Path) -> None:
    """A restart of the exchange service keeps every lease (tests/hub/test_hub_stores.py): in the hub's
    PostgreSQL schema `exchange` when the hub has a database, else a sqlite file in the service's own store,
    under a dot name the store never hands out as a key."""
    def lease_database(s) -> str:
        told = {svc["name"]: svc for svc in config(s).JupyterHub.services}["device-lab-exchange"]["command"]
        return settings_of(told)["lease_database"]

    s = settings(tmp_path, grading_workers=1)
    assert lease_database(s) == f"sqlite:///{s.paths.exchange_store}/.leases/leases.sqlite"
    pg = settings(tmp_path, grading_workers=1, database_url="postgresql+psycopg2://hub@db.example:5432/hub")
    found = lease_database(pg)
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(found).query))
    assert found.startswith("postgresql+psycopg2://hub@db.example:5432/hub?")
    assert query == {"options": "-csearch_path=exchange", "passfile": str(pg.paths.grader_passfile)}


def test_the_workers_tokens_have_the_exchanges_staff_scope_and_nothing_else(tmp_path: Path) -> None:
    c = config(settings(tmp_path, grading_workers=3))
    (role,) = [r for r in c.JupyterHub.load_roles if set(r.get("services", [])) & set(workers(c))]
    assert sorted(role["services"]) == sorted(workers(c)) and len(role["services"]) == 3
    assert set(role["scopes"]) == {ACCESS, STAFF_SCOPE}


def test_no_workers_by_default_and_the_sandbox_is_auto(tmp_path: Path) -> None:
    s = settings(tmp_path)
    assert (s.grading_workers, s.worker_sandbox) == (0, "auto")
    c = config(s)
    assert workers(c) == {} and "grading_worker" not in s.paths.config.read_text()
    assert not any(r["name"].endswith("-workers") for r in c.JupyterHub.load_roles)
    (one,) = workers(config(settings(tmp_path, grading_workers=1))).values()
    assert settings_of(one["command"])["sandbox"] == "auto"


def test_workers_are_refused_without_the_http_exchange(tmp_path: Path) -> None:
    check_settings(settings(tmp_path, grading_workers=2))
    with pytest.raises(HubError, match="needs --exchange http"):
        check_settings(settings(tmp_path, exchange="files", grading_workers=2))
    check_settings(settings(tmp_path, exchange="files"))  # no workers: the files exchange as today
    with pytest.raises(HubError, match="--grading-workers -1: give 0 or more"):
        check_settings(settings(tmp_path, grading_workers=-1))
    with pytest.raises(HubError, match="--worker-sandbox 'chroot': choose auto, bwrap, unshare, none"):
        check_settings(settings(tmp_path, grading_workers=1, worker_sandbox="chroot"))


def test_setup_again_keeps_the_number_of_workers_and_their_sandbox(tmp_path: Path) -> None:
    from autograder.hub.cli import _last_setup, add_arguments

    def parse(*argv: str):
        hub = argparse.ArgumentParser()
        add_arguments(hub, ROOT)
        return hub.parse_args(["setup", *argv])

    assert (_last_setup(tmp_path / "none").grading_workers, _last_setup(tmp_path / "none").worker_sandbox) \
        == (0, "auto")
    s = settings(tmp_path, grading_workers=2, worker_sandbox="bwrap", lease_s=30.0)
    s.paths.hub.mkdir(parents=True)
    s.save()
    again = _last_setup(Path(s.root))
    assert (again.grading_workers, again.worker_sandbox, again.lease_s) == (2, "bwrap", 30.0)
    args = parse("--roster", "r.csv")
    assert args.grading_workers is None and args.worker_sandbox is None  # not given: the last setup's
    assert args.lease_s is None and parse("--lease-s", "60").lease_s == 60.0
    assert parse("--grading-workers", "0").grading_workers == 0


@pytest.mark.parametrize("lease_s", [5.0, 2 * 24 * 3600.0])
def test_a_lease_too_short_to_grade_in_or_over_a_day_is_refused(tmp_path: Path, lease_s: float) -> None:
    with pytest.raises(HubError, match="--lease-s"):
        check_settings(settings(tmp_path, grading_workers=1, lease_s=lease_s))


def test_a_workers_course_copy_has_the_course_and_not_the_graders_files(tmp_path: Path) -> None:
    copy = tmp_path / "worker-1"
    copy_course(ROOT, copy)
    assert (copy / "source").is_dir() and (copy / "release").is_dir()
    assert not (copy / "gradebook.db").exists()
