"""The nodes' network (autograder/hub/setup/nodes.py) on real network namespaces: a part reaches the hub's
address and nothing else, and the hub's network goes away without a trace. Needs root and iproute2; opt in
with DEVICELAB_HUB_TESTS=1 (under CI=true a skip is a failure)."""

import http.server
import json
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from autograder.hub.setup import nodes
from tests.hub_support import hub_tests_or_skip

REACH = """
import json, socket, sys
found = {}
for host, port in json.loads(sys.argv[1]):
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((host, port)); found[f"{host}:{port}"] = "connected"
    except OSError as exc:
        found[f"{host}:{port}"] = type(exc).__name__
    finally:
        s.close()
print(json.dumps(found))
"""


@pytest.fixture
def network(tmp_path):
    """A free 10.X.0.0/16 with the hub's address up and two parts; afterwards all of it removed."""
    hub_tests_or_skip()
    subnet = nodes.claim_subnet(tmp_path)
    nodes.hub_up(subnet)
    try:
        yield subnet, nodes.make(nodes.Node(subnet, 7)), nodes.make(nodes.Node(subnet, 1007))
    finally:
        nodes.hub_down(subnet)


def serve(host: str) -> tuple[http.server.HTTPServer, int]:
    """Serve HTTP on `host` (any free port) in a thread; return the server and its port."""
    server = http.server.HTTPServer((host, 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def reach_from(node: nodes.Node, targets: list[tuple[str, int]]) -> dict[str, str]:
    """Try each target from inside the node; return host:port -> connected or the error's name."""
    done = subprocess.run([*nodes.run_prefix(node), sys.executable, "-c", REACH, json.dumps(targets)],
                          capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def test_a_part_reaches_the_hub_and_nothing_else(network):
    subnet, ann, bob = network
    hub, hub_port = serve(nodes.hub_address(subnet))
    loopback, loopback_port = serve("127.0.0.1")
    try:
        got = reach_from(ann, [(nodes.hub_address(subnet), hub_port), ("127.0.0.1", loopback_port),
                               (bob.address, 22), (nodes.part_address(subnet, 9), 80)])
    finally:
        hub.shutdown()
        loopback.shutdown()
    assert got.pop(f"{nodes.hub_address(subnet)}:{hub_port}") == "connected"
    assert "connected" not in got.values(), got


def test_the_hub_reaches_each_part_at_its_address(network):
    _, ann, _ = network
    server = subprocess.Popen([*nodes.run_prefix(ann), sys.executable, "-m", "http.server", "8123", "--bind",
                               ann.address], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://{ann.address}:8123/", timeout=3) as reply:
                    assert reply.status == 200
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        server.kill()
        server.wait(10)


def test_a_stale_node_is_made_again_and_the_network_goes_without_a_trace(tmp_path):
    hub_tests_or_skip()
    subnet = nodes.claim_subnet(tmp_path)
    nodes.hub_up(subnet)
    try:
        node = nodes.make(nodes.Node(subnet, 3))
        nodes.make(node)  # a part started again at once: its old namespace and link are replaced
        assert (nodes.NETNS_FOLDER / node.name).exists()
    finally:
        nodes.hub_down(subnet)
    assert not (nodes.NETNS_FOLDER / node.name).exists()
    assert nodes.hub_address(subnet) not in subprocess.run(["ip", "-o", "addr"], capture_output=True,
                                                           text=True, check=True).stdout
    assert f"10.{subnet}." not in subprocess.run(["ip", "route"], capture_output=True, text=True,
                                                 check=True).stdout


def test_two_setups_at_once_claim_different_networks_and_a_gone_owner_frees_its_own(tmp_path):
    hub_tests_or_skip()
    first, second = tmp_path / "hub-1", tmp_path / "hub-2"
    first.mkdir()
    second.mkdir()
    a, b = nodes.claim_subnet(first), nodes.claim_subnet(second)
    assert a != b
    first.rmdir()  # that hub is gone: its network may be claimed again
    assert nodes.claim_subnet(second) == a


def test_addresses_never_collide_with_the_hub_or_each_other():
    subnet = 213
    seen = {nodes.part_address(subnet, k) for k in range(1, 3000)}
    assert len(seen) == 2999 and nodes.hub_address(subnet) not in seen
    assert all(not a.endswith((".0", ".255", ".1")) for a in seen)
    assert max(len(nodes.Node(254, k).name) for k in (1, 62_499)) <= 15  # a link's name: 15 at most
    with pytest.raises(ValueError):
        nodes.part_address(subnet, 0)
