"""The nodes' network (autograder/hub/spawning/nodes.py) on real network namespaces: a part reaches the hub's
address and nothing else, and the hub's network goes away without a trace. Needs root and iproute2; opt in
with DEVICELAB_HUB_TESTS=1 (under CI=true a skip is a failure)."""

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from autograder.hub.spawning import nodes
from tests.hub_support import hub_tests_or_skip

pytestmark = pytest.mark.usefixtures("machine_of_its_own")  # (tests/conftest.py)

REACH = """
import json, socket, sys
found = {}
for host, port, device in json.loads(sys.argv[1]):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family); s.settimeout(3)
    try:
        if device:  # unprivileged since Linux 5.7: out of that link whatever the routes say
            s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, device.encode())
        s.connect(socket.getaddrinfo(host, port, family, socket.SOCK_STREAM)[0][4])  # with a scope
        found[f"{host}:{port}:{device}"] = "connected"
    except OSError as exc:
        found[f"{host}:{port}:{device}"] = type(exc).__name__
    finally:
        s.close()
print(json.dumps(found))
"""
OTHER_ADDRESS = "198.18.{subnet}.1"  # another address of the hub's node (benchmarking range), for a test


@pytest.fixture
def network(tmp_path):
    """A free 10.X.0.0/16 with the hub's address up, two servers on it standing for the proxy and the hub's
    API (their ports the ones the filter lets through, as hub start passes them) and two parts; afterwards
    all of it removed. Yields the subnet, the two parts and the two servers' ports."""
    hub_tests_or_skip()
    subnet = nodes.claim_subnet(tmp_path)
    servers = []
    try:
        nodes.hub_up(subnet, (1,))  # the address first, for the servers to bind to
        servers = [serve(nodes.hub_address(subnet)) for _ in range(2)]
        ports = tuple(port for _, port in servers)
        nodes.hub_up(subnet, ports)
        yield subnet, nodes.make(nodes.Node(subnet, 7)), nodes.make(nodes.Node(subnet, 1007)), ports
    finally:
        for server, _ in servers:
            server.shutdown()
        nodes.hub_down(subnet)


class Server6(http.server.HTTPServer):
    address_family = socket.AF_INET6


def serve(host: str, port: int = 0) -> tuple[http.server.HTTPServer, int]:
    """Serve HTTP on `host` (`port`, or any free one) in a thread; return the server and its port."""
    server = (Server6 if ":" in host else http.server.HTTPServer)((host, port),
                                                                   http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def reach_from(node: nodes.Node, targets: list[tuple]) -> dict[str, str]:
    """Try each target (host, port[, link to bind to]) from inside the node; return host:port:link ->
    connected or the error's name."""
    targets = [(*t, "")[:3] for t in targets]
    done = subprocess.run([*nodes.run_prefix(node), sys.executable, "-c", REACH, json.dumps(targets)],
                          capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def test_a_part_reaches_the_hub_and_nothing_else(network):
    subnet, ann, bob, (proxy_port, _) = network
    loopback, loopback_port = serve("127.0.0.1")
    try:
        got = reach_from(ann, [(nodes.hub_address(subnet), proxy_port), ("127.0.0.1", loopback_port),
                               (bob.address, 22), (nodes.part_address(subnet, 9), 80)])
    finally:
        loopback.shutdown()
    assert got.pop(f"{nodes.hub_address(subnet)}:{proxy_port}:") == "connected"
    assert "connected" not in got.values(), got


@pytest.fixture
def other_address(network):
    """Another address of the hub's node, as a machine's own network address is (on loopback here)."""
    address = OTHER_ADDRESS.format(subnet=network[0])
    subprocess.run(["ip", "addr", "add", f"{address}/32", "dev", "lo"], check=True)
    try:
        yield address
    finally:
        subprocess.run(["ip", "addr", "del", f"{address}/32", "dev", "lo"], check=True)


def test_a_part_bound_to_its_link_reaches_no_other_address_or_port_of_the_hub(network, other_address):
    """The red team's attack: SO_BINDTODEVICE sends out of the part's link whatever its routes say, and the
    hub's node answers for every address it has. What the part may reach is the proxy's and the API's ports
    at the hub's address, filtered on the hub's side of the link."""
    subnet, ann, _, (_, api_port) = network
    servers = [serve(other_address), serve(nodes.hub_address(subnet)), serve("0.0.0.0")]
    (_, other_port), (_, unlisted_port), (_, anywhere_port) = servers
    try:
        got = reach_from(ann, [(other_address, other_port, "eth0"), (other_address, anywhere_port, "eth0"),
                               (nodes.hub_address(subnet), unlisted_port, "eth0"),
                               (nodes.hub_address(subnet), unlisted_port),
                               (nodes.hub_address(subnet), api_port, "eth0")])
    finally:
        for server, _ in servers:
            server.shutdown()
    assert got.pop(f"{nodes.hub_address(subnet)}:{api_port}:eth0") == "connected"
    assert "connected" not in got.values(), got


def test_a_part_reaches_no_service_of_the_hub_over_ipv6(network):
    """A veth pair's ends get IPv6 link-local addresses, and a service bound to :: listens on them too."""
    _, ann, _, _ = network
    hub_end = link_local(ann, [])
    link_local(ann, ["-n", ann.name], "eth0")  # the part's end: ready to send
    server, port = serve("::")
    try:
        got = reach_from(ann, [(f"{hub_end}%eth0", port), ("::1", port)])
    finally:
        server.shutdown()
    assert "connected" not in got.values(), got


def link_local(node: nodes.Node, where: list[str], link: str = "") -> str:
    """Wait until one end of the node's link has its IPv6 link-local address (after duplicate address
    detection); return it."""
    deadline = time.monotonic() + 60
    while True:
        shown = subprocess.run(["ip", *where, "-6", "-o", "addr", "show", "dev", link or node.name, "scope",
                                "link"], capture_output=True, text=True, check=True).stdout
        if shown and "tentative" not in shown:
            return shown.split()[3].split("/")[0]
        assert time.monotonic() < deadline, f"no link-local address on {link or node.name}: {shown!r}"
        time.sleep(0.1)


def test_the_hub_reaches_each_part_at_its_address(network):
    _, ann, _, _ = network
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
    nodes.hub_up(subnet, (8000, 8081))
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
    assert nodes.guard_table(subnet) not in subprocess.run(["nft", "list", "tables"], capture_output=True,
                                                           text=True, check=True).stdout


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


def test_the_nodes_network_is_not_the_machine_s(network):
    """What the nodes add is seen in this module's network namespace only (`machine_of_its_own`): not by the
    machine, where another test's browser may be loading pages."""
    subnet = network[0]
    machine = f"/proc/{os.getppid()}/ns/net"  # the test run's own process, which never left the machine's
    assert os.readlink("/proc/thread-self/ns/net") != os.readlink(machine)
    ours = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    theirs = subprocess.run(["nsenter", f"--net={machine}", "ip", "-o", "addr"], capture_output=True,
                            text=True, check=True).stdout
    assert nodes.hub_address(subnet) in ours and nodes.hub_address(subnet) not in theirs
