"""The exchange: how assignments reach students and submissions and feedback come back.

Two backends, `folder/` (nbgrader's exchange folder, made safe) and `http/` (a hub service), each behind the
two interfaces of `interfaces.py`: what the instructor's commands need and what the autograde service needs.
`setup/exchanges.py` is the one place that names and picks a backend; `choice.py` builds it.
"""
