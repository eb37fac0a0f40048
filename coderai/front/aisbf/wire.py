"""The AISBF broker's messages (../shared/protocols/aisbf-broker.md): one JSON text frame
each, `"v": 1`. Pure functions: what the node says, and how it reads what it is told.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from coderai.errors import CoderaiError
from coderai.front.api.openai.reply import data_event
from coderai.front.dispatch.engine_view import EngineView

VERSION = 1
#: the broker's frame limit; a reply that would exceed it is answered with an error
MAX_FRAME_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class BrokerRequest:
    """One operation the broker asks of this node."""

    op: str
    request_id: str
    payload: dict[str, Any]


class BadFrame(ValueError):
    """A frame that is not a broker message this node can answer."""


def read(text: str | bytes) -> dict[str, Any]:
    """A frame as a JSON object, or BadFrame."""
    try:
        message = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadFrame(f"not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise BadFrame("not a JSON object")
    return message


def request_of(message: dict[str, Any]) -> BrokerRequest | None:
    """The operation a message asks for; None for one that asks nothing (an answer to
    this node's register or heartbeat). BadFrame for a request that cannot be answered."""
    op = message.get("op")
    if op is None:
        return None
    request_id = message.get("request_id")
    if not isinstance(op, str) or not isinstance(request_id, str) or not request_id:
        raise BadFrame("a request needs a string op and request_id")
    payload = message.get("payload")
    if payload is None:
        payload = {}
    if not isinstance(payload, dict):
        raise BadFrame(f"{op}: the payload must be an object")
    return BrokerRequest(op, request_id, payload)


def encode(message: dict[str, Any]) -> str:
    return json.dumps({"v": VERSION, **message}, ensure_ascii=False, separators=(",", ":"))


def ok(request_id: str, payload: Any) -> dict[str, Any]:
    return {"request_id": request_id, "status": "ok", "payload": payload}


def error(
    request_id: str,
    message: str,
    code: str,
    details: dict[str, Any] | None = None,
    error_type: str = "server_error",
) -> dict[str, Any]:
    """An error reply; its details are the OpenAI error object (what `ending` streams).
    It carries an event all the same: without one the broker keeps a client waiting until
    its own timeout (hours)."""
    if details is None:
        details = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
    return {
        "request_id": request_id,
        "status": "error",
        "event": "error",
        "error": message,
        "code": code,
        "details": details,
    }


def failure(request_id: str, exc: CoderaiError) -> dict[str, Any]:
    """An error reply for what HTTP would answer with a status: its OpenAI error object in
    the details."""
    return error(request_id, exc.message, exc.code or exc.error_type, exc.envelope())


def chunk(request_id: str, event: str) -> dict[str, Any]:
    """One SSE event of a stream ("data: {...}\\n\\n"), as the broker relays it."""
    return {"request_id": request_id, "status": "ok", "event": "chunk", "payload": {"chunk": event}}


def done(request_id: str) -> dict[str, Any]:
    return {"request_id": request_id, "status": "ok", "event": "done", "payload": {}}


def streams(payload: dict[str, Any]) -> bool:
    """Whether the broker relays a request's answer as a stream: it goes by the payload's
    `stream` alone, whatever the operation."""
    return bool(payload.get("stream"))


def ending(reply: dict[str, Any], stream: bool) -> list[dict[str, Any]]:
    """The frames that end a request with the error reply `reply`. The broker relays to a
    stream only its chunk-like events and ends it only on `done` (an error reply is
    dropped there, and its client waits for hours), so a stream's error is its last chunk,
    the error event an SSE client reads, then `done`."""
    if not stream:
        return [reply]
    request_id = reply["request_id"]
    return [chunk(request_id, data_event(reply["details"]).decode()), done(request_id)]


def pending(request_id: str, estimated_timeout: float) -> dict[str, Any]:
    """A keep-alive while a whole answer is being made."""
    payload = {"estimated_timeout": estimated_timeout}
    return {"request_id": request_id, "status": "pending", "payload": payload}


def new_request_id(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:16]}"


def hardware(views: list[EngineView]) -> dict[str, Any]:
    """A torch-free summary from what the engines report in their heartbeats: each card
    once (an engine owns its cards), its VRAM, and the fleet's totals."""
    gpus: list[dict[str, Any]] = []
    seen: set[str] = set()
    for view in views:
        for card, reading in view.gpu_readings.items():
            if card in seen:
                continue
            seen.add(card)
            gpus.append(
                {
                    "index": len(gpus),
                    "name": card,
                    "vendor": reading.get("vendor") or "unknown",
                    "vram_mb": int(reading.get("vram_total_mb") or 0),
                    "used_mb": int(reading.get("vram_used_mb") or 0),
                    "engine": view.name,
                }
            )
    total = sum(g["vram_mb"] for g in gpus)
    used = sum(g["used_mb"] for g in gpus)
    return {
        "gpus": gpus,
        "gpu_count": len(gpus),
        "total_vram_mb": total,
        "available_vram_mb": max(0, total - used),
    }


def capabilities(views: list[EngineView], models: list[str]) -> dict[str, Any]:
    """What this node can run: its engines' backends, their request slots, its models."""
    serving = [v for v in views if v.serving]
    return {
        "engines": len(serving),
        "slots": sum(v.slots for v in serving),
        "formats": sorted({c for v in serving for c in v.capabilities}),
        "models": models,
        "streaming": True,
    }


def register(
    request_id: str, config_endpoint: str, token: str, views: list[EngineView], models: list[str]
) -> dict[str, Any]:
    payload = {
        "endpoint": config_endpoint,
        "transport": "websocket",
        "registration_token": token,
        "hardware": hardware(views),
        "studio_endpoints": [],
        "capabilities": capabilities(views, models),
    }
    return {"op": "register", "request_id": request_id, "payload": payload}


def heartbeat(request_id: str, views: list[EngineView], in_flight: int) -> dict[str, Any]:
    serving = [v for v in views if v.serving]
    payload = {
        "hardware": hardware(views),
        "engines": len(serving),
        "free_slots": sum(v.free_slots for v in serving),
        "in_flight": in_flight,
    }
    return {"op": "heartbeat", "request_id": request_id, "payload": payload}


def standing(register_payload: dict[str, Any]) -> dict[str, Any]:
    """What a registration tells the broker that holds until the fleet changes: its cards
    and capabilities. VRAM in use, which moves with every load, is left to heartbeats."""
    hardware = register_payload["hardware"]
    cards = [{k: v for k, v in gpu.items() if k != "used_mb"} for gpu in hardware["gpus"]]
    return {"gpus": cards, "capabilities": register_payload["capabilities"]}


def register_again(told: dict[str, Any], now: dict[str, Any], before: dict[str, Any]) -> bool:
    """Whether to register again: the broker keeps what the last registration said (a
    heartbeat changes none of it), so a change is told once it has held for one look;
    engines that join one after another then make one registration, not one each."""
    return now != told and now == before


def sse_events(data: bytes) -> list[str]:
    """Separate SSE events ("data: ...\\n\\n" each). The JSON in them is compact, so a
    blank line only ever ends an event."""
    return [event.decode() + "\n\n" for event in data.split(b"\n\n") if event]
