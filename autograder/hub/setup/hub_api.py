"""A small client for the hub's REST API, with the token of the `devicelab-cli` service."""

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from autograder.hub.settings import HubSettings


@dataclass(frozen=True)
class Reply:
    """A REST reply: the HTTP status and the decoded JSON body (None when empty or not JSON)."""

    status: int
    body: Any


@dataclass(frozen=True)
class HubAPI:
    """The hub's REST API at one base URL, with one token."""

    base: str
    token: str

    @classmethod
    def for_settings(cls, s: HubSettings) -> "HubAPI":
        """Return the API of this hub (straight to the hub's own port), with the command line's token."""
        return cls(f"http://{s.hub_address}:{s.hub_port}/hub/api", s.paths.cli_token.read_text().strip())

    def call(self, method: str, path: str, body: Any = None, timeout: float = 30) -> Reply:
        """Send one request; HTTP errors come back as replies, not exceptions."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Authorization": f"token {self.token}",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        try:
            return Reply(status, json.loads(raw) if raw else None)
        except ValueError:
            return Reply(status, None)

    def up(self) -> bool:
        """Return whether the hub answers."""
        try:
            return self.call("GET", "/", timeout=3).status == 200
        except OSError:
            return False
