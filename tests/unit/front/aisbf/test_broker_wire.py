"""The broker's messages as the node writes and reads them (pure functions)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from coderai.config import BrokerConfig
from coderai.errors import ModelNotFound
from coderai.front.aisbf import wire
from coderai.front.dispatch.engine_view import EngineView
from tests.support.sse import one


def view(name: str, readings: dict[str, dict[str, object]], state: str = "ready") -> EngineView:
    return EngineView(name=name, backend="nvidia", capabilities=("gguf",), gpus=tuple(readings),
                      slots=4, state=state, free_slots=3, gpu_readings=readings)  # fmt: skip


def test_the_hardware_summary_counts_each_card_once_and_sums_vram() -> None:
    a = {"GPU-a": {"vendor": "nvidia", "vram_total_mb": 24576, "vram_used_mb": 4000}}
    b = {"GPU-b": {"vendor": "amd", "vram_total_mb": 16384, "vram_used_mb": 0},
         "GPU-c": {"vendor": "amd", "vram_total_mb": 8192, "vram_used_mb": 192}}  # fmt: skip
    summary = wire.hardware([view("n", a), view("r", b), view("copy", a)])
    assert summary["gpu_count"] == 3
    assert [g["name"] for g in summary["gpus"]] == ["GPU-a", "GPU-b", "GPU-c"]
    assert [g["index"] for g in summary["gpus"]] == [0, 1, 2]
    assert summary["total_vram_mb"] == 24576 + 16384 + 8192
    assert summary["available_vram_mb"] == 24576 + 16384 + 8192 - 4192
    assert summary["gpus"][1] == {"index": 1, "name": "GPU-b", "vendor": "amd",
                                  "vram_mb": 16384, "used_mb": 0, "engine": "r"}  # fmt: skip


def test_capabilities_count_only_serving_engines() -> None:
    caps = wire.capabilities([view("a", {}), view("b", {}, state="dead")], ["m"])
    assert (caps["engines"], caps["slots"], caps["formats"], caps["models"]) == (
        1,
        4,
        ["gguf"],
        ["m"],
    )


def test_every_error_reply_carries_an_event() -> None:
    reply = wire.failure("r1", ModelNotFound("no model 'x'", param="model"))
    assert reply["event"] == "error" and reply["status"] == "error"
    assert reply["code"] == "model_not_found"
    assert reply["details"]["error"]["param"] == "model"
    assert json.loads(wire.encode(reply))["v"] == 1


def test_a_streamed_error_is_its_last_chunk_then_done_and_a_whole_ones_a_reply() -> None:
    reply = wire.failure("r1", ModelNotFound("no model 'x'", param="model"))
    assert wire.ending(reply, stream=False) == [reply]
    last, end = wire.ending(reply, stream=True)
    # the broker relays to a stream only such events, and ends it on `done` alone
    assert [(f["status"], f["event"]) for f in (last, end)] == [("ok", "chunk"), ("ok", "done")]
    assert last["request_id"] == end["request_id"] == "r1"
    # one whole event, as an HTTP client would read it
    event = one(last["payload"]["chunk"]).json()
    assert event == ModelNotFound("no model 'x'", param="model").envelope()


def test_the_nodes_own_errors_carry_an_openai_error_object_too() -> None:
    reply = wire.error("r2", "no", "unsupported_operation", error_type="invalid_request_error")
    error = {"message": "no", "type": "invalid_request_error", "param": None,
             "code": "unsupported_operation"}  # fmt: skip
    assert reply["details"] == {"error": error}
    (last, _) = wire.ending(reply, stream=True)
    assert one(last["payload"]["chunk"]).json() == reply["details"]


@pytest.mark.parametrize(("stream", "streams"), [(True, True), (False, False), (None, False)])
def test_the_broker_streams_what_its_payload_says_streams(stream: object, streams: bool) -> None:
    assert wire.streams({"model": "m", "stream": stream}) is streams


def test_what_a_registration_says_leaves_vram_in_use_to_heartbeats() -> None:
    card = {"GPU-a": {"vendor": "nvidia", "vram_total_mb": 24576, "vram_used_mb": 4000}}
    busier = {"GPU-a": {**card["GPU-a"], "vram_used_mb": 9000}}
    said = wire.register("r", "", "t", [view("n", card)], ["m"])["payload"]
    said_busier = wire.register("r", "", "t", [view("n", busier)], ["m"])["payload"]
    assert wire.standing(said) == wire.standing(said_busier)
    more = wire.register("r", "", "t", [view("n", card), view("o", {})], ["m"])["payload"]
    assert wire.standing(more) != wire.standing(said)


def test_a_change_is_registered_once_it_has_held_for_one_look() -> None:
    told, joining, joined = {"engines": 0}, {"engines": 1}, {"engines": 2}
    assert not wire.register_again(told, told, told)  # nothing changed
    assert not wire.register_again(told, joining, told)  # just changed: wait a look
    assert not wire.register_again(told, joined, joining)  # still changing
    assert wire.register_again(told, joined, joined)  # settled
    assert not wire.register_again(joined, joined, joined)  # told already


@pytest.mark.parametrize(
    "frame",
    ["not json", "[1, 2]", '{"op": 3, "request_id": "r"}', '{"op": "x"}',
     '{"op": "x", "request_id": "r", "payload": [1]}'],
)  # fmt: skip
def test_a_frame_that_asks_nothing_answerable_is_a_bad_frame(frame: str) -> None:
    with pytest.raises(wire.BadFrame):
        wire.request_of(wire.read(frame))


def test_answers_to_the_nodes_own_messages_ask_nothing() -> None:
    assert wire.request_of({"v": 1, "event": "registered", "status": "ok"}) is None
    request = wire.request_of({"v": 1, "op": "models.list", "request_id": "b1"})
    assert request == wire.BrokerRequest("models.list", "b1", {})


def test_sse_bytes_split_into_one_event_per_chunk() -> None:
    data = b'data: {"a":"x\\n\\ny"}\n\ndata: [DONE]\n\n'
    assert wire.sse_events(data) == ['data: {"a":"x\\n\\ny"}\n\n', "data: [DONE]\n\n"]


def test_a_broker_url_needs_its_identity() -> None:
    assert BrokerConfig().url is None
    with pytest.raises(ValidationError, match="provider_id"):
        BrokerConfig(url="ws://b/api/coderai/wss")
    with pytest.raises(ValidationError, match="ws:// or wss://"):
        BrokerConfig(url="http://b", provider_id="p", client_id="c", registration_token="t")
    BrokerConfig(url="wss://b/x", provider_id="p", client_id="c", registration_token="t")


def test_urls_in_error_text_lose_their_query_and_user() -> None:
    from coderai.front.aisbf.client import without_secrets

    said = "403, message='Invalid', url='wss://u:pw@b.example:8443/api/coderai/wss?t=SECRET'"
    assert (
        without_secrets(said)
        == "403, message='Invalid', url='wss://b.example:8443/api/coderai/wss'"
    )
    assert without_secrets("no url here") == "no url here"
