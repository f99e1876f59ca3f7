"""Run the course for a class on one JupyterHub: accounts, configuration, the exchange, autograde on submit,
LTI, and the instructor's commands.

Its parts and the order they may import each other in are CONTRIBUTING's *Map of the code*, checked by
tests/test_layers.py.
"""
