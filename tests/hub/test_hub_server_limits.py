"""On a real hub: each student's server holds its memory limit, and one student's runaway code stops only
their own kernel. Root and DEVICELAB_HUB_TESTS=1 (real Unix accounts, a hub on loopback)."""

import re
from pathlib import Path

import pytest

from tests.hub_support import (
    class_hub,
    hub_tests_or_skip,
    memory_cgroup,
    run_in_kernel,
    server_pid,
    start_server,
)

ROSTER = "id,name,role\nann,Ann Hog,student\nbob,Bob Calm,student\nivy,Ivy Teacher,instructor\n"
LIMIT_MIB = 600

pytestmark = pytest.mark.timeout(900)


@pytest.fixture
def hub(tmp_path):
    hub_tests_or_skip()
    with class_hub(tmp_path, ROSTER, ("--mem-limit", str(LIMIT_MIB), "--cpu-limit", "1")) as running:
        yield running


def limit_and_kills(folder: Path) -> tuple[int, int]:
    if (folder / "memory.limit_in_bytes").exists():
        limit, events = int((folder / "memory.limit_in_bytes").read_text()), "memory.oom_control"
    else:
        limit, events = int((folder / "memory.max").read_text()), "memory.events"
    kills = re.search(r"^oom_kill (\d+)$", (folder / events).read_text(), flags=re.MULTILINE)
    return limit, int(kills.group(1)) if kills else 0


def test_a_runaway_kernel_is_stopped_at_its_limit_and_the_other_servers_carry_on(hub):
    tokens = {m: hub.token(m) for m in ("ann", "bob")}
    for member, token in tokens.items():
        start_server(hub, member, token)
    folders = {m: memory_cgroup(server_pid(hub.user(m))) for m in tokens}
    assert folders["ann"] != folders["bob"] and all(f.name == hub.user(m) for m, f in folders.items())
    for folder in folders.values():
        assert limit_and_kills(folder) == (LIMIT_MIB << 20, 0)

    # Ann's code allocates three times her limit: the OOM killer stops her kernel, nothing else.
    hog = run_in_kernel(hub, "ann", tokens["ann"],
                        "blocks = [bytearray(64 << 20) for _ in range(30)]\nprint('allocated')")
    assert hog.reply != "ok" and "allocated" not in hog.output, hog
    assert limit_and_kills(folders["ann"])[1] >= 1
    assert limit_and_kills(folders["bob"])[1] == 0
    assert server_pid(hub.user("ann")), "her server itself runs on (JupyterLab tells her the kernel died)"

    # Bob's server carries on, and so does Ann's once the kernel is gone.
    calm = run_in_kernel(hub, "bob", tokens["bob"], "print(6 * 7)")
    assert (calm.reply, calm.output.strip()) == ("ok", "42"), calm
    again = run_in_kernel(hub, "ann", tokens["ann"], "print(len(bytearray(64 << 20)))")
    assert (again.reply, again.output.strip()) == ("ok", str(64 << 20)), again
