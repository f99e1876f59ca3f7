"""The generated configuration and commands of a hub with `--nodes namespaces` (no root needed): the hub's API
and proxy on the hub's address, the exchange and the workers as external services with a token each, reached
through the proxy, each started on its node as the grader account in a box of its own folder; students'
servers on nodes of their own; refused without the HTTP exchange or the servers' boxes."""

import sys
from dataclasses import replace
from pathlib import Path

import pytest
from traitlets.config.loader import PyFileConfigLoader

from autograder.hub.node_start import part_command, part_environment
from autograder.hub.settings import HubError, HubSettings
from autograder.hub.setup.checks import check_settings
from autograder.hub.setup.exchanges import exchange_setup
from autograder.hub.setup.parts import exchange_url
from autograder.hub.setup.render import render_all, write_all
from autograder.hub.setup.roster import Member
from tests.hub_support import settings_of

ROOT = Path(__file__).resolve().parents[2]
MEMBERS = [Member("ann", "Ann Lee", "student"), Member("ivy", "Ivy Teach", "instructor")]
PROXY_ROUTE = "http://10.213.0.1:8000/services/device-lab-exchange/"


def settings(tmp_path: Path, **changes) -> HubSettings:
    return replace(HubSettings(root=str(tmp_path / "root"), course_id="device-lab", course_source=str(ROOT),
                               prefix="dl-", python=sys.executable, proxy=sys.executable, exchange="http",
                               exchange_port=9123, grading_workers=2, nodes="namespaces", node_subnet=213,
                               ip="10.213.0.1"), **changes)


def config(s: HubSettings):
    write_all(render_all(s, MEMBERS))
    s.paths.cli_token.write_text("t0ken\n")
    for part in exchange_setup(s).parts(s):
        part.token_file(s).write_text(f"token-of-{part.service}\n")
    return PyFileConfigLoader(s.paths.config.name, path=str(s.paths.config.parent)).load_config()


def test_the_hub_listens_on_its_address_and_servers_get_nodes_of_their_own(tmp_path: Path) -> None:
    c = config(settings(tmp_path))
    assert c.JupyterHub.hub_ip == c.JupyterHub.hub_connect_ip == "10.213.0.1"
    assert c.JupyterHub.bind_url == "http://10.213.0.1:8000/"
    assert c.LimitedSpawner.node_subnet == 213


def test_the_exchange_and_workers_are_external_services_known_by_their_tokens(tmp_path: Path) -> None:
    s = settings(tmp_path)
    services = {svc["name"]: svc for svc in config(s).JupyterHub.services}
    exchange = services["device-lab-exchange"]
    assert exchange == {"name": "device-lab-exchange", "url": "http://10.213.0.3:9123",
                        "api_token": "token-of-device-lab-exchange"}
    for k in (1, 2):
        assert services[f"device-lab-worker-{k}"] == {"name": f"device-lab-worker-{k}",
                                                      "api_token": f"token-of-device-lab-worker-{k}"}
    # the parts on the hub's node (formgrader, autograde) reach the exchange through the proxy too
    autograde = services["device-lab-autograde"]["command"]
    assert settings_of(autograde)["http_exchange"] == PROXY_ROUTE == exchange_url(s)


def test_a_part_starts_on_its_node_as_the_grader_in_a_box_of_its_own_folder(tmp_path: Path) -> None:
    s = settings(tmp_path)
    exchange, worker_1, _ = exchange_setup(s).parts(s)
    config(s)
    line = part_command(s, worker_1)
    assert line[:4] == ["ip", "netns", "exec", "dl213n2"]
    assert line[4:9] == ["setpriv", "--reuid=dl-grader", "--regid=dl-grader", "--init-groups", "--"]
    box = line[9:line.index("--", 9) + 1]
    assert box[0] == "bwrap"
    writable = [box[i + 1] for i, a in enumerate(box) if a == "--bind"]
    assert writable == [str(s.paths.worker_course(1))]  # its own folder, nothing else writable
    assert str(s.paths.course / "source") not in box and str(s.paths.hub) not in box
    assert line[len(box) + 9:] == list(worker_1.argv)
    assert worker_1.settings.url == settings_of(list(worker_1.argv))["url"] == PROXY_ROUTE
    env = part_environment(s, exchange)
    assert env["JUPYTERHUB_API_TOKEN"] == "token-of-device-lab-exchange"
    assert env["JUPYTERHUB_API_URL"] == "http://10.213.0.1:8081/hub/api"
    assert env["JUPYTERHUB_SERVICE_URL"] == "http://10.213.0.3:9123"
    assert part_command(s, exchange)[3] == "dl213n1"


@pytest.mark.parametrize("changes", [{"exchange": "files", "grading_workers": 0}, {"server_box": "none"},
                                     {"nodes": "racks"}])
def test_nodes_are_refused_where_they_cannot_keep_their_promise(tmp_path: Path, changes: dict) -> None:
    with pytest.raises(HubError, match="nodes"):
        check_settings(settings(tmp_path, **changes))
