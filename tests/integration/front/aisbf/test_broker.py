"""The AISBF uplink against a test-side broker written from the documented protocol and as
strict as AISBF itself: the node registers with its hardware and models (and again when
they change), sends heartbeats, answers models.list and chats (streamed and whole) through
its own dispatcher, ends every error in a way the broker reads as an end (a stream's as its
last chunk, then `done`), leaves with its last frames delivered, and reconnects after the
broker restarts or refuses a frame, never holding two sockets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import aisbf
from tests.support.aisbf import AisbfPeer
from tests.support.server import Server, expected_chat, serving, wait_for
from tests.support.sse import DONE, one

KEY = "broker-admin-key"
ENGINES = [{"name": "e1", "backend": "cpu", "capabilities": ["fake"]}]
MODELS: list[dict[str, Any]] = [
    {"id": "chat", "format": "fake", "options": {"output_tokens": 12}},
    # the engine process dies after three tokens (the supervisor starts a new one)
    {"id": "doomed", "format": "fake",
     "options": {"crash_after_tokens": 3, "tokens_per_second": 50}},
    {"id": "slow", "format": "fake", "options": {"tokens_per_second": 20, "output_tokens": 10_000}},
]  # fmt: skip


@pytest.fixture(scope="module")
def peer() -> Iterator[AisbfPeer]:
    peer = AisbfPeer()
    yield peer
    peer.close()


def node(folder: Path, peer: AisbfPeer) -> AbstractContextManager[Server]:
    """A node offered to `peer`, entered once its engine has joined; it ends its requests at
    once when stopped (no grace period)."""
    broker = {"url": peer.url, "provider_id": aisbf.PROVIDER, "client_id": aisbf.CLIENT,
              "registration_token": aisbf.TOKEN, "heartbeat_seconds": 0.3,
              "reconnect_max_seconds": 1}  # fmt: skip
    config = {"engine_specs": ENGINES, "heartbeat_interval": 0.3, "shutdown_grace_seconds": 0}
    return serving(folder, config, MODELS, 1, KEY, extra_config={"broker": broker})


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, peer: AisbfPeer) -> Iterator[Server]:
    with node(tmp_path_factory.mktemp("broker"), peer) as srv:
        wait_for(lambda: peer.registered() == 1)
        yield srv


@pytest.fixture
def own_peer() -> Iterator[AisbfPeer]:
    """A broker for one test, whose node it may stop."""
    peer = AisbfPeer()
    yield peer
    peer.close()


@pytest.fixture
def own_srv(tmp_path: Path, own_peer: AisbfPeer) -> Iterator[Server]:
    with node(tmp_path, own_peer) as srv:
        wait_for(lambda: own_peer.registered() == 1)
        yield srv


def status(srv: Server) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {KEY}"}
    answer = httpx.get(srv.url + "/admin/api/broker", headers=headers, timeout=10)
    assert answer.status_code == 200
    body: dict[str, Any] = answer.json()
    return body


def chat(peer: AisbfPeer, stream: bool, model: str = "chat", **kw: Any) -> list[dict[str, Any]]:
    payload = {"model": model, "messages": [{"role": "user", "content": "hello"}],
               "stream": stream, "temperature": None, "tools": None, **kw}  # fmt: skip
    return peer.call("chat.completions", payload)


def streamed_error(replies: list[dict[str, Any]]) -> dict[str, Any]:
    """The OpenAI error object a stream's last chunk carries, checked to be followed by
    `done`, the one end of a stream the broker relays."""
    assert [(r["status"], r["event"]) for r in replies[-2:]] == [("ok", "chunk"), ("ok", "done")]
    # one whole event per chunk, as an HTTP client would read it
    error: dict[str, Any] = one(replies[-2]["payload"]["chunk"]).json()["error"]
    return error


def streamed_text(replies: list[dict[str, Any]]) -> str:
    parts = []
    for reply in replies:
        if reply.get("event") == "chunk":
            event = one(reply["payload"]["chunk"]).json()
            if event is not DONE:
                for choice in event.get("choices", []):
                    parts.append(choice["delta"].get("content") or "")
    return "".join(parts)


def test_the_node_registers_with_its_hardware_and_models_and_beats(
    srv: Server, peer: AisbfPeer
) -> None:
    session = peer.sessions[-1]
    assert session.register is not None
    payload = session.register["payload"]
    assert payload["registration_token"] == aisbf.TOKEN
    assert payload["hardware"]["gpu_count"] == 0  # no card here: an honest zero
    assert payload["capabilities"]["models"] == [m["id"] for m in MODELS]
    # the broker asks for the models at once, as AISBF does
    wait_for(lambda: session.models is not None)
    assert session.models is not None and session.models["status"] == "ok"
    assert [m["id"] for m in session.models["payload"]["data"]] == [m["id"] for m in MODELS]
    # heartbeats follow the fleet: the engine that joined after registration is counted
    wait_for(lambda: session.heartbeats and session.heartbeats[-1]["payload"]["engines"] == 1)
    assert session.heartbeats[-1]["payload"]["free_slots"] >= 1
    shown = status(srv)
    assert shown["state"] == "registered" and shown["session_id"].startswith("coderai_")
    assert "registration_token" not in json.dumps(shown)


def test_the_node_registers_again_when_its_engines_or_models_change(
    own_srv: Server, own_peer: AisbfPeer
) -> None:
    # it registered before its engine joined; the broker keeps what the last registration
    # said, so the node tells it again once the engine serves
    wait_for(lambda: own_peer.capabilities()["engines"] == 1)
    assert own_peer.capabilities()["slots"] >= 1
    session = own_peer.sessions[-1]
    registrations, beats = len(session.registrations), len(session.heartbeats)
    # a fleet that does not change is not registered at each heartbeat
    wait_for(lambda: len(session.heartbeats) >= beats + 5)
    assert len(session.registrations) == registrations
    headers = {"Authorization": f"Bearer {KEY}"}
    added = httpx.post(own_srv.url + "/admin/api/models", headers=headers,
                       json={"id": "extra", "format": "fake"}, timeout=10)  # fmt: skip
    assert added.status_code == 200, added.text
    wait_for(lambda: "extra" in own_peer.capabilities()["models"])
    assert len(session.registrations) == registrations + 1  # once for one change
    assert len(own_peer.sessions) == 1 and own_peer.registered() == 1  # the same session


def test_a_streamed_chat_ends_with_done_then_the_done_event(srv: Server, peer: AisbfPeer) -> None:
    replies = chat(peer, stream=True)
    assert all(r["status"] == "ok" for r in replies)
    assert [r["event"] for r in replies[-2:]] == ["chunk", "done"]
    assert replies[-2]["payload"]["chunk"] == "data: [DONE]\n\n"
    assert streamed_text(replies) == expected_chat("hello", 12)


def test_a_whole_chat_is_the_openai_body(srv: Server, peer: AisbfPeer) -> None:
    (reply,) = chat(peer, stream=False, max_tokens=5)
    assert reply["status"] == "ok" and "event" not in reply
    body = reply["payload"]
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"] == expected_chat("hello", 5)
    assert body["usage"]["completion_tokens"] == 5
    # it was an API request like any other: on the Activity page, as the broker's
    headers = {"Authorization": f"Bearer {KEY}"}
    recent = httpx.get(srv.url + "/admin/api/activity", headers=headers).json()["recent"]
    assert any(r["key"] == "broker" and r["completion_tokens"] == 5 for r in recent)


@pytest.mark.parametrize(
    ("op", "payload", "code"),
    [
        ("chat.completions", {"model": "chat"}, "invalid_request_error"),
        ("chat.completions", {"model": "nope", "messages": [{"role": "user", "content": "x"}]},
         "model_not_found"),
        ("chat.completions", {"model": "chat", "messages": [{"role": "user", "content": "x"}],
                              "top_k": -4}, "invalid_request_error"),
        ("proxy", {"endpoint_path": "/v1/models"}, "unsupported_operation"),
    ],
)  # fmt: skip
def test_a_request_the_node_cannot_answer_gets_an_error_with_an_event(
    srv: Server, peer: AisbfPeer, op: str, payload: dict[str, Any], code: str
) -> None:
    (reply,) = peer.call(op, payload)
    assert reply["status"] == "error" and reply["event"] == "error"
    assert reply["code"] == code and reply["error"]


@pytest.mark.parametrize(
    ("op", "payload", "error_type", "code"),
    [
        ("chat.completions", {"model": "chat"}, "invalid_request_error", None),
        ("chat.completions", {"model": "nope", "messages": [{"role": "user", "content": "x"}]},
         "invalid_request_error", "model_not_found"),
        ("proxy", {"endpoint_path": "/v1/chat/completions"}, "invalid_request_error",
         "unsupported_operation"),
    ],
)  # fmt: skip
def test_a_streamed_request_that_fails_ends_with_its_error_as_the_last_chunk(
    srv: Server, peer: AisbfPeer, op: str, payload: dict[str, Any], error_type: str,
    code: str | None,
) -> None:  # fmt: skip
    session = peer.sessions[-1]
    dropped = len(session.dropped)
    replies = peer.call(op, {**payload, "stream": True})
    assert len(replies) == 2
    error = streamed_error(replies)
    assert (error["type"], error["code"]) == (error_type, code) and error["message"]
    assert len(session.dropped) == dropped  # nothing was sent that the broker does not relay


def test_a_stream_cut_by_a_dying_engine_ends_with_an_error_event(
    srv: Server, peer: AisbfPeer
) -> None:
    replies = chat(peer, stream=True, model="doomed")
    chunks = [r for r in replies if r.get("event") == "chunk"]
    assert len(chunks) > 1, "the stream began before the engine died"
    assert "data: [DONE]\n\n" not in [c["payload"]["chunk"] for c in chunks]
    # the error, as an HTTP client reads it, then the end the broker relays
    assert streamed_error(replies)["code"] == "engine_failed"
    srv.wait_ready(1, timeout=30)  # its replacement joins before the next test


def test_a_frame_over_16_mib_is_refused_and_the_node_connects_again(
    srv: Server, peer: AisbfPeer
) -> None:
    before = len(peer.sessions)
    peer.send_raw(json.dumps({"v": 1, "op": "models.list", "pad": "x" * aisbf.MAX_FRAME}))
    wait_for(lambda: peer.sessions[before - 1].close_code is not None)
    # the node closes with 1009 (too big); the broker, still sending, may see only the cut
    assert "frame was refused" in status(srv)["last_error"]
    wait_for(lambda: len(peer.sessions) > before and peer.registered() == 1)
    assert peer.max_open == 1  # the old socket was closed before the new one opened
    assert streamed_text(chat(peer, stream=True)) == expected_chat("hello", 12)


def test_after_the_broker_restarts_the_node_registers_again(srv: Server, peer: AisbfPeer) -> None:
    before = len(peer.sessions)
    slow = {"model": "slow", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    running = peer.begin("chat.completions", slow)
    wait_for(lambda: srv.health()["engines"][0]["in_flight"] == 1)
    peer.stop()
    # the stream's socket is gone: its job is cancelled, its slot is free again
    assert running.result(10)[-1]["event"] == "closed"
    wait_for(lambda: srv.health()["engines"][0]["in_flight"] == 0)
    wait_for(lambda: status(srv)["state"] == "backoff")
    # a broker that refuses the node's identity (403): the node keeps trying
    peer.token = "another-token"
    peer.start()
    wait_for(lambda: peer.refused > 0)
    wait_for(lambda: "403" in (status(srv)["last_error"] or ""))
    # the refusal quotes the URL it asked; the token was never in it
    assert aisbf.TOKEN not in json.dumps(status(srv)) and aisbf.TOKEN not in srv.log()
    assert peer.tokens_in_query == 0
    peer.stop()
    peer.token = aisbf.TOKEN
    peer.start()
    wait_for(lambda: len(peer.sessions) > before and peer.registered() == 1, timeout=15)
    assert peer.max_open == 1
    (reply,) = chat(peer, stream=False, max_tokens=3)
    assert reply["payload"]["choices"][0]["message"]["content"] == expected_chat("hello", 3)
    assert status(srv)["connects"] >= 3


def test_at_shutdown_a_brokered_stream_ends_and_its_last_frames_reach_the_broker(
    own_srv: Server, own_peer: AisbfPeer
) -> None:
    slow = {"model": "slow", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    running = own_peer.begin("chat.completions", slow)
    wait_for(lambda: own_srv.health()["engines"][0]["in_flight"] == 1)
    own_srv.stop()
    replies = running.result(10)
    assert streamed_error(replies)["code"] == "shutting_down"
    session = own_peer.sessions[-1]
    # the broker had handled every frame before the node closed the socket
    assert session.lost == [] and session.dropped == []
    assert session.close_code == 1000
