"""Autograde on submit: the service that grades each submission as it arrives, and its queue."""
