"""nbgrader's exchange over HTTP: a hub service that keeps the files, identity from the hub's tokens.

- archive.py: the tar stream a transfer travels in, read with caps and refusals (links, devices, paths out).
- store.py: where the service keeps released assignments, submissions and feedback (a Protocol; a folder).
- service.py: the hub service's HTTP API (run by the hub as the grader account).
- client.py: nbgrader's exchange classes that call it (the Assignments tab, `nbgrader submit`, collect).
- api.py: what both ends agree on (paths, scopes, the staff's client); staff.py: the grader account's side.
- work.py: leases on submissions and the results grading workers post; lease_book.py: leases in a database.
- autograde.py: the autograde service's side (`interfaces.AutogradeExchange`), and what it tells workers.
"""
