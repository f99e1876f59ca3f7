"""The exchange: how assignments reach students and submissions and feedback come back.

Two backends, `folder/` (nbgrader's exchange folder, made safe) and `http/` (a hub service), each behind the
two interfaces of `interfaces.py`: what the instructor's commands need and what the autograde service needs.
`choice.py` is the one place that picks a backend.
"""
