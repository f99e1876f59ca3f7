"""`hub start`: run JupyterHub (and through it the proxy, the formgrader service and the idle culler; with
`--nodes namespaces`, node_start.py runs the parts that have nodes of their own beside it)."""

import os
import signal
from dataclasses import dataclass
from pathlib import Path

from autograder.hub.settings import HubError, HubSettings
from autograder.hub.setup import accounts


@dataclass(frozen=True)
class HubCommand:
    """How to run the hub: the command, its folder and its environment."""

    argv: list[str]
    cwd: Path
    env: dict[str, str]


def hub_command(s: HubSettings, debug: bool = False) -> HubCommand:
    """Return the command that runs this hub in the foreground."""
    if not s.paths.config.is_file():
        raise HubError(f"no {s.paths.config}; run `python -m autograder hub setup` first")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "JPY_"))}
    env["PATH"] = os.pathsep.join([str(s.bin_dir), env.get("PATH", "/usr/bin:/bin")])
    argv = [str(s.bin_dir / "jupyterhub"), "-f", str(s.paths.config), *(["--debug"] if debug else [])]
    return HubCommand(argv, s.paths.hub, env)


def start(s: HubSettings, debug: bool = False) -> None:
    """Replace this process with JupyterHub (stop it with Ctrl-C or SIGTERM)."""
    accounts.require_root("hub start")
    command = hub_command(s, debug)
    os.chdir(command.cwd)
    # A script's background job (`hub start &`) inherits SIGINT and SIGQUIT ignored, and so would the hub's
    # services: each would then outlast JupyterHub's 10 s wait for it to stop on SIGINT at every shutdown.
    for sig in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    if s.nodes == "namespaces":  # JupyterHub, and the parts on nodes of their own beside it
        from autograder.hub import node_start

        node_start.main(s, command)
    os.execve(command.argv[0], command.argv, command.env)
