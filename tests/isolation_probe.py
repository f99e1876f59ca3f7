"""Code a test runs inside a sandbox or a student's server to list what it can see of other people's."""

import inspect

# Prints the sorted list of visible folders anyone may write (mode o+w); /proc, /sys and /dev left out.
WORLD_WRITABLE = (
    "import os\n"
    "found = {'/' + t for t in os.listdir('/') if os.stat('/' + t).st_mode & 0o002}\n"
    "for top in sorted(os.listdir('/')):\n"
    "    if top in ('proc', 'sys', 'dev'):\n"
    "        continue\n"
    "    for here, dirs, _ in os.walk('/' + top):\n"
    "        found |= {os.path.join(here, d) for d in dirs if not os.path.islink(os.path.join(here, d))\n"
    "                  and os.stat(os.path.join(here, d)).st_mode & 0o002}\n"
    "print(sorted(found))\n"
)


def listening() -> list[tuple[int, int]]:
    """Return (port, owner's uid) of every socket listening on TCP in this network namespace."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as handle:
            lines = handle.read().splitlines()[1:]
        for line in lines:
            fields = line.split()
            if fields[3] == "0A":
                found.append((int(fields[1].rsplit(":", 1)[1], 16), int(fields[7])))
    return found


LISTENING = inspect.getsource(listening)  # the same function, to run inside a student's kernel
