"""Which conversation a request belongs to, for cache-aware routing between a model's
replicas (front/dispatch/replicas.py): the client's own key where it sends one (OpenAI's
`prompt_cache_key` or `user`, the Responses API's `safety_identifier`, Anthropic's
`metadata.user_id`), set by its route with `claim`; else a hash of the prompt's leading
block: the system prompt, the tools and the first message after them, which an agent sends
unchanged at every turn of one conversation (and which begin its cached prefix).

Both are short hashes: a job carries its affinity to the engine, which names those it
holds in its heartbeat (engine/holdings.py), so the bus never carries a client's own key.
"""

from __future__ import annotations

import hashlib
import json
from contextvars import ContextVar
from typing import Any

#: a completion's prompt: this many leading characters name its conversation
LEADING_CHARS = 2048

_CLIENT_KEY: ContextVar[str | None] = ContextVar("affinity_client_key", default=None)


def claim(*keys: str | None) -> None:
    """The current request's own conversation key: the first of these it sent."""
    for key in keys:
        if key:
            _CLIENT_KEY.set("client:" + _digest(key))
            return


def of(fields: dict[str, Any]) -> str:
    """The affinity of a job with these Job fields (pure but for the request's claim)."""
    claimed = _CLIENT_KEY.get()
    if claimed is not None:
        return claimed
    return leading_hash(fields.get("messages") or [], fields.get("tools") or [],
                        fields.get("prompt") or "", fields.get("prompt_ids") or [])  # fmt: skip


def leading_hash(messages: list[Any], tools: list[Any], prompt: str, prompt_ids: list[int]) -> str:
    """A short hash of what begins the prompt (pure); "" when there is nothing to hash."""
    if messages:
        leading = [isinstance(m, dict) and m.get("role") in _LEADING for m in messages]
        system = [m for m, lead_in in zip(messages, leading, strict=True) if lead_in]
        first = next((m for m, lead_in in zip(messages, leading, strict=True) if not lead_in),
                     None)  # fmt: skip
        lead: Any = [system, tools, first]
    elif prompt:
        lead = prompt[:LEADING_CHARS]
    elif prompt_ids:
        lead = prompt_ids[: LEADING_CHARS // 4]
    else:
        return ""
    return "lead:" + _digest(json.dumps(lead, sort_keys=True, default=str, ensure_ascii=False))


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


_LEADING = frozenset({"system", "developer"})
