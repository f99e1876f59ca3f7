"""Run the course for a class on one JupyterHub: accounts, configuration, and the instructor's loop.

The hub's parts, lowest first; each imports only its own part and those below it (tests/test_layers.py):

- settings.py: HubSettings (hub.json) and the paths under the hub's root.
- exchange.py, arrival.py, formgrader_exchange.py: nbgrader's exchange made safe, and formgrader's plugins.
- http_exchange/: the exchange as a hub service over HTTP (`--exchange http`), and nbgrader's classes for it.
- setup/: Unix accounts, the roster, `hub setup` and `add-user`, the generated configuration, the spawner.
- lms/: LTI 1.3 launches, the accounts of LMS people, the LMS's class list, grade passback.
- service/: autograde on submit (a service of the hub, run as the grader account) and its queue.
- cli.py, loop.py, http_loop.py, start.py, extensions.py, grade_export.py: the instructor's commands.
"""
