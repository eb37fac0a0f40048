"""The running CoderAI server, as the shell commands that talk to it (`launch`, `models
scan`) reach it: its URL from the config it was started with, and JSON requests to it."""

from __future__ import annotations

import json
import urllib.request
from typing import Any


def server_url(config: Any) -> str:
    """Where `coderai run` with this config listens, as a client reaches it."""
    host = str(config.server.host).strip("[]")
    host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{config.server.port}"


def request_json(
    url: str, key: str, body: dict[str, Any] | None = None, timeout: float = 30
) -> Any:
    """A GET (or, with a body, a POST) answered with a JSON object; urllib's errors (an
    HTTPError for a refusal) and ValueError (an answer that is not one) go to the caller."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer = json.loads(response.read())
    if not isinstance(answer, dict):
        raise ValueError("not a JSON object")
    return answer
