"""`hub start`: run JupyterHub (and through it the proxy, the formgrader service and the idle culler; with
`--nodes namespaces`, node_start.py runs the parts that have nodes of their own beside it)."""

import os
import signal

from autograder.hub.hub_process import hub_command
from autograder.hub.settings import HubSettings
from autograder.hub.setup import accounts


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
