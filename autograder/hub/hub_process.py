"""How to run JupyterHub for a hub that is set up: its command line, folder and environment (`HubCommand`).
`hub start` runs it in place of itself (start.py); with `--nodes namespaces` the supervisor runs it beside
the parts on nodes of their own (node_start.py)."""

import os
from dataclasses import dataclass
from pathlib import Path

from autograder.hub.settings import HubError, HubSettings


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
