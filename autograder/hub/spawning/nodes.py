"""Several nodes on one machine (`hub setup --nodes namespaces`): each part of the hub in a network namespace
of its own, linked only to the hub's.

The hub's node is the machine's own namespace; it takes one address of its own, 10.X.0.1, on loopback. Every
other part (the exchange service, each grading worker, each student's server) gets a network namespace with
one link, a veth pair, whose far end is in the hub's namespace: the part has the address 10.X.a.b and a route
to the hub's address only. So a part reaches the hub (its proxy, its API) and nothing else: not another part
(no route, and nothing forwards between links), not the machine's loopback services, not the outside. The
hub reaches each part at its address. A part's mount namespace comes from the box it runs in (server_box.py),
which shows it its own folder and no other part's.

Routes alone do not confine a part: a socket bound to its link (SO_BINDTODEVICE, unprivileged since Linux
5.7) sends to any address whatever the routes say, and the hub's node answers for every address it has, IPv6
link-local ones included. So the hub's side of every link is filtered (nftables, one table per hub network):
what comes in from a part is a new TCP connection to the hub's address at the proxy's or the API's port, or
the answer to a connection the hub opened; the rest is dropped, and nothing is forwarded to or from a link.

Every command here needs root (CAP_NET_ADMIN); `hub start` and the spawner run as root.
"""

import ctypes
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from autograder.hub.settings import node_hub_address as hub_address

NETNS_FOLDER = Path("/run/netns")
CLAIMS = Path("/run/devicelab-hub-nodes")  # X -> the root of the hub that chose it (two setups at once)
CLONE_NEWNET = 0x40000000
SUBNETS = range(200, 255)  # the hub's addresses are 10.X.0.0/16 for one X of these
EXCHANGE_INDEX = 1
FIRST_WORKER_INDEX = 2
FIRST_SERVER_INDEX = 1000  # a student's server: this plus the user's id in the hub's database


class NodeError(RuntimeError):
    """A node's namespace or link could not be made or removed; the message says which command failed."""


@dataclass(frozen=True)
class Node:
    """One part's place in the hub's network: its namespace's name, its link's name and its address."""

    subnet: int  # X of 10.X.0.0/16
    index: int  # the part's number (EXCHANGE_INDEX, workers, FIRST_SERVER_INDEX + user id)

    @property
    def name(self) -> str:
        """Return the network namespace's name (also the hub's end of the link: at most 15 characters)."""
        return f"dl{self.subnet}n{self.index}"

    @property
    def address(self) -> str:
        """Return the part's address."""
        return part_address(self.subnet, self.index)

    @property
    def hub_address(self) -> str:
        """Return the hub's address, the only one the part can reach."""
        return hub_address(self.subnet)


def part_address(subnet: int, index: int) -> str:
    """Return part `index`'s address (10.X.a.b, b from 2 to 251: never the hub's, never a broadcast)."""
    if not 1 <= index < 250 * 256:
        raise ValueError(f"part number {index} is out of range")
    return f"10.{subnet}.{index // 250}.{index % 250 + 2}"


def _ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise NodeError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def claim_subnet(owner: Path) -> int:
    """Return an X for which nothing here has an address, a route or a claim in 10.X.0.0/16, claimed for
    `owner` (a hub's root: a claim whose owner is gone is free again)."""
    taken = set(re.findall(r"\b10\.(\d+)\.", _ip("-o", "addr") + _ip("route") + _ip("-o", "link")))
    taken |= {m.group(1) for p in _netns_names() if (m := re.match(r"dl(\d+)n", p))}
    CLAIMS.mkdir(mode=0o700, exist_ok=True)
    for subnet in SUBNETS:
        claim = CLAIMS / str(subnet)
        if str(subnet) in taken or (claim.exists() and _owner_lives(claim)):
            continue
        claim.unlink(missing_ok=True)
        try:
            fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another setup took it just now
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(str(owner))
        return subnet
    raise NodeError(f"no free 10.X.0.0/16 network for the hub's nodes (X from {SUBNETS[0]} to {SUBNETS[-1]} "
                    f"are in use or claimed in {CLAIMS})")


def _owner_lives(claim: Path) -> bool:
    try:
        return Path(claim.read_text(encoding="utf-8").strip()).exists()
    except OSError:
        return True  # unreadable: leave it alone


def _has_link(name: str) -> bool:
    """Return whether the caller's network namespace has a link of this name (asked of the kernel:
    /sys/class/net shows the namespace sysfs was mounted in, which need not be the caller's)."""
    done = subprocess.run(["ip", "-o", "link", "show", "dev", name], capture_output=True, text=True,
                          timeout=30, check=False)
    return done.returncode == 0


def _netns_names() -> list[str]:
    return sorted(p.name for p in NETNS_FOLDER.iterdir()) if NETNS_FOLDER.is_dir() else []


def _nft(ruleset: str) -> None:
    try:
        done = subprocess.run(["nft", "-f", "-"], input=ruleset, capture_output=True, text=True, timeout=30,
                              check=False)
    except FileNotFoundError:
        raise NodeError("nftables' `nft` is needed to filter the nodes' links (Debian: apt-get install "
                        "nftables)") from None
    if done.returncode != 0:
        raise NodeError(f"nft: {done.stderr.strip() or done.returncode}")


def guard_table(subnet: int) -> str:
    """Return the name of the nftables table (family inet) that filters this network's links."""
    return f"devicelab_nodes_{subnet}"


def guard_rules(subnet: int, ports: tuple[int, ...]) -> str:
    """Return the ruleset that (re)makes the filter on the hub's side of every link of this network: from a
    part, only new TCP connections to the hub's address at `ports` and answers to the hub's own; nothing
    forwarded."""
    if not ports or not all(0 < p < 65536 for p in ports):
        raise ValueError(f"the hub's ports must be given: {ports!r}")
    table, links = guard_table(subnet), f'"dl{subnet}n*"'
    allowed = ", ".join(str(p) for p in sorted(set(ports)))
    return f"""table inet {table} {{}}
delete table inet {table}
table inet {table} {{
    chain from_parts {{
        type filter hook input priority filter; policy accept;
        iifname {links} ct state established,related accept
        iifname {links} ip daddr {hub_address(subnet)} tcp dport {{ {allowed} }} ct state new accept
        iifname {links} drop
    }}
    chain between_parts {{
        type filter hook forward priority filter; policy accept;
        iifname {links} drop
        oifname {links} drop
    }}
}}
"""


def hub_up(subnet: int, ports: tuple[int, ...]) -> None:
    """Give the hub's namespace its address (on loopback), once, and filter every link of this network on
    the hub's side: a part may open connections to the hub's address at `ports` (the proxy's, the API's)
    only."""
    _nft(guard_rules(subnet, ports))
    address = hub_address(subnet)
    if address not in _ip("-o", "addr", "show", "dev", "lo"):
        _ip("addr", "add", f"{address}/32", "dev", "lo")


def hub_down(subnet: int) -> None:
    """Remove every node of this network and the hub's address."""
    for name in _netns_names():
        if re.fullmatch(rf"dl{subnet}n\d+", name):
            remove(Node(subnet, int(name.rsplit("n", 1)[1])))
    address = hub_address(subnet)
    if address in _ip("-o", "addr", "show", "dev", "lo"):
        _ip("addr", "del", f"{address}/32", "dev", "lo")
    if shutil.which("nft"):
        table = guard_table(subnet)
        _nft(f"table inet {table} {{}}\ndelete table inet {table}\n")


def make(node: Node) -> Node:
    """Make the part's namespace and its link to the hub's (a stale one of the same name is made again)."""
    if (NETNS_FOLDER / node.name).exists():
        remove(node)
    _ip("netns", "add", node.name)
    try:
        _ip("link", "add", node.name, "type", "veth", "peer", "name", "eth0", "netns", node.name)
        inside = ("-n", node.name)
        _ip(*inside, "addr", "add", f"{node.address}/32", "dev", "eth0")
        _ip(*inside, "link", "set", "lo", "up")
        _ip(*inside, "link", "set", "eth0", "up")
        _ip(*inside, "route", "add", f"{node.hub_address}/32", "dev", "eth0")
        _ip("link", "set", node.name, "up")
        _ip("route", "replace", f"{node.address}/32", "dev", node.name, "src", node.hub_address)
    except NodeError:
        remove(node)
        raise
    return node


def remove(node: Node) -> None:
    """Remove the part's link and namespace; nothing when there is none.

    The link goes first and at once: a namespace's own links are taken down later, by the kernel's clean-up
    after the namespace is gone, and a part started again at once would find its link's name still taken.
    """
    if _has_link(node.name):
        _ip("link", "del", node.name)  # both ends of the pair
    if (NETNS_FOLDER / node.name).exists():
        _ip("netns", "del", node.name)


def enter(node: Node) -> None:
    """Move the calling process into the part's network namespace (root; e.g. before a server drops to its
    account)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(NETNS_FOLDER / node.name, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {node.name}")
    finally:
        os.close(fd)


def run_prefix(node: Node) -> list[str]:
    """Return the command line that runs a command (as root) inside the part's network namespace."""
    return ["ip", "netns", "exec", node.name]
