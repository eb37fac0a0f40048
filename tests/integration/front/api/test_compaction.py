"""Compaction through the Responses API: Codex's trigger item (its remote compaction v2,
when `openai_base_url` points at this server), OpenAI's /v1/responses/compact, and the
compaction item read back in a later request. A scripted model answers the request for a
summary with one text and a conversation that starts from a summary with another, so the
tests see what the model was given."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from coderai.front.api.responses.reasoning_copy import COMPACTION_PREFIX
from coderai.front.api.responses.request import SUMMARY_HEAD
from tests.support.server import Server, running
from tests.support.sse import named_events

SUMMARY = "The user asked for the weather in Paris; the tool said 21 C."
AFTER = "Going on from the summary."
HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "Weather in Paris?"},
    {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "21 C"},
    {"role": "assistant", "content": "It is 21 C."},
]
TRIGGER = {"type": "compaction_trigger"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    rules = [["Write only the summary.", SUMMARY], [SUMMARY_HEAD, AFTER]]
    options = {"script": ["First answer.", "After a tool."], "script_rules": rules}
    models = [{"id": "m", "format": "fake", "options": options}]
    with running(tmp_path_factory.mktemp("compact"), models, tmp_path_factory.mktemp("c")) as srv:
        yield srv


def _summary(item: dict[str, Any]) -> str:
    assert item["type"] == "compaction" and item["id"].startswith("cmp_")
    sealed: str = item["encrypted_content"]
    assert sealed.startswith(COMPACTION_PREFIX)
    return base64.b64decode(sealed[len(COMPACTION_PREFIX) :]).decode()


def _post(server: Server, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(server.url + path, json={"model": "m", **body}, timeout=30)


def test_codexs_trigger_streamed_gives_exactly_one_compaction_item(server: Server) -> None:
    r = _post(server, "/v1/responses", {"input": [*HISTORY, TRIGGER], "stream": True})
    assert r.status_code == 200, r.text
    events = named_events(r.text)
    kinds = [name for name, _ in events]
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.output_item.done", "response.completed"]  # fmt: skip
    done = [data for name, data in events if name == "response.output_item.done"]
    assert _summary(done[0]["item"]) == SUMMARY
    completed = events[-1][1]["response"]
    assert [i["type"] for i in completed["output"]] == ["compaction"]
    assert completed["usage"]["output_tokens"] > 0
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))


def test_the_summary_goes_on_in_the_next_request(server: Server) -> None:
    whole = _post(server, "/v1/responses", {"input": [*HISTORY, TRIGGER]}).json()
    [item] = whole["output"]
    assert _summary(item) == SUMMARY
    # as Codex goes on: the user's messages it kept, then the compaction item
    after = _post(server, "/v1/responses", {"input": [HISTORY[0], item]})
    assert after.status_code == 200, after.text
    assert after.json()["output"][0]["content"][0]["text"] == AFTER


def test_the_compact_endpoint_keeps_the_users_messages_and_the_summary(server: Server) -> None:
    r = _post(server, "/v1/responses/compact", {"input": HISTORY, "instructions": "Be brief."})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "response.compaction" and body["id"].startswith("resp_")
    kept, item = body["output"][:-1], body["output"][-1]
    assert [(k["role"], k["content"]) for k in kept] == [
        ("user", [{"type": "input_text", "text": "Weather in Paris?"}])
    ]
    assert _summary(item) == SUMMARY
    assert body["usage"]["total_tokens"] == (
        body["usage"]["input_tokens"] + body["usage"]["output_tokens"]
    )


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/responses", {"input": [TRIGGER, *HISTORY]}, "input[0]"),
        ("/v1/responses", {"input": [{"type": "compaction", "encrypted_content": "gAAAA"}]},
         "input"),
        ("/v1/responses/compact", {"input": HISTORY, "stream": True}, "stream"),
    ],
)  # fmt: skip
def test_what_cannot_be_compacted_or_read_is_a_400(
    server: Server, path: str, body: dict[str, Any], param: str
) -> None:
    r = _post(server, path, body)
    assert r.status_code == 400, r.text
    assert json.loads(r.text)["error"]["param"] == param
