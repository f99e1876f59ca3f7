"""Run the course for a class on one JupyterHub: accounts, configuration, and the instructor's loop."""
