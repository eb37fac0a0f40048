"""A hostile or careless client gets a clear OpenAI-style error, and nothing is lost: no
engine slot leaks, no request hangs, no traceback lands in the log for a client's mistake."""

from __future__ import annotations

import gzip
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgpack
import pytest

from coderai.bus.codec import MAGIC, encode
from coderai.bus.kinds import MsgType
from coderai.bus.messages import Hello
from coderai.front.app import MAX_BODY_BYTES
from tests.support.bus import intruder
from tests.support.server import Server, serving, wait_for

KEY = "hostile-admin-key"
SLOTS = 2
MODELS: list[dict[str, Any]] = [
    {"id": "fake", "format": "fake", "options": {"output_tokens": 8}},
    {"id": "slow", "format": "fake", "options": {"tokens_per_second": 20, "output_tokens": 10_000}},
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # a short queue timeout: a leaked slot shows up as a 503 within seconds, not a hang
    config = {"engines": 1, "max_parallel_requests": SLOTS, "queue_timeout": 3}
    with serving(tmp_path_factory.mktemp("hostile"), config, MODELS, 1, KEY) as srv:
        yield srv


def chat(content: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"model": "fake", "messages": [{"role": "user", "content": content}], **extra}


def post_raw(srv: Server, path: str, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(srv.url + path, content=body, timeout=10,
                      headers={"Content-Type": "application/json", **headers})  # fmt: skip


def assert_envelope(r: httpx.Response, status: int, param: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["Content-Type"].startswith("application/json")
    error: dict[str, Any] = r.json()["error"]
    assert error["message"]
    if param is not None:
        assert error["param"] == param
    return error


def free_slots(srv: Server) -> int:
    return int(srv.health()["engines"][0]["free_slots"])


# Raw JSON text: "\ud800" is a valid JSON escape that decodes to a lone surrogate, which no
# UTF-8 encoder (msgpack's included) accepts.
UNENCODABLE = [
    ("max_tokens", '{"model":"fake","messages":[{"role":"user","content":"hi"}],'
                   '"max_tokens":18446744073709551616}'),
    ("seed", '{"model":"fake","messages":[{"role":"user","content":"hi"}],'
             '"seed":18446744073709551616}'),
    ("seed", '{"model":"fake","messages":[{"role":"user","content":"hi"}],'
             '"seed":-9223372036854775809}'),
    ("messages", '{"model":"fake","messages":[{"role":"user","content":"\\ud800"}]}'),
    ("stop", '{"model":"fake","messages":[{"role":"user","content":"hi"}],"stop":["\\udfff"]}'),
]  # fmt: skip


def test_values_an_engine_cannot_receive_are_400_and_leak_no_slot(server: Server) -> None:
    for _ in range(4):  # more bad requests than the engine has slots
        for param, body in UNENCODABLE:
            r = post_raw(server, "/v1/chat/completions", body.encode())
            assert_envelope(r, 400, param)
    r = post_raw(server, "/v1/completions", b'{"model":"fake","prompt":"a\\ud800"}')
    assert_envelope(r, 400, "prompt")
    assert free_slots(server) == SLOTS
    ok = httpx.post(server.url + "/v1/chat/completions", json=chat(), timeout=10)
    assert ok.status_code == 200, ok.text


def test_a_bad_value_is_refused_even_when_it_would_have_queued(server: Server) -> None:
    """With every slot taken the request would queue; it is refused before that, so the
    queue never holds a job that cannot be sent."""
    streams = [
        httpx.stream(
            "POST",
            server.url + "/v1/chat/completions",
            timeout=30,
            json={**chat(), "model": "slow", "stream": True},
        )
        for _ in range(SLOTS)
    ]
    responses = [s.__enter__() for s in streams]
    try:
        wait_for(lambda: free_slots(server) == 0)
        r = post_raw(server, "/v1/chat/completions", UNENCODABLE[0][1].encode())
        assert_envelope(r, 400, "max_tokens")
        assert server.health()["queued"] == 0
    finally:
        for stream in streams:
            stream.__exit__(None, None, None)
    assert all(r.status_code == 200 for r in responses)
    wait_for(lambda: free_slots(server) == SLOTS)


@pytest.mark.parametrize(
    ("field", "value"),
    [("stream", "yes"), ("max_tokens", True), ("temperature", "0.5"), ("seed", 1.5)],
)
def test_types_are_strict_not_coerced(server: Server, field: str, value: object) -> None:
    r = httpx.post(server.url + "/v1/chat/completions", json={**chat(), field: value}, timeout=10)
    assert_envelope(r, 400, field)


def test_json_nested_too_deep_is_a_400_envelope(server: Server) -> None:
    depth = 100_000
    body = b'{"model":"fake","messages":' + b"[" * depth + b"]" * depth + b"}"
    assert_envelope(post_raw(server, "/v1/chat/completions", body), 400)


def test_a_body_labelled_gzip_that_is_not_is_a_400_envelope(server: Server) -> None:
    r = post_raw(server, "/v1/chat/completions", json.dumps(chat()).encode(),
                 **{"Content-Encoding": "gzip"})  # fmt: skip
    assert_envelope(r, 400)
    # a real gzip body is read as such
    r = post_raw(server, "/v1/chat/completions", gzip.compress(json.dumps(chat()).encode()),
                 **{"Content-Encoding": "gzip"})  # fmt: skip
    assert r.status_code == 200, r.text


def test_a_gzip_bomb_is_a_413_that_closes_its_connection_and_the_next_request_works(
    server: Server,
) -> None:
    """A small body that inflates past the limit: refused with 413, its connection closed
    with `Connection: close` (the rest of it is never read), so a keep-alive client opens a
    new connection for its next request instead of meeting a reset."""
    bomb = gzip.compress(b"{" + b" " * (MAX_BODY_BYTES + (1 << 20)) + b"}")
    assert len(bomb) < MAX_BODY_BYTES // 100
    with httpx.Client(base_url=server.url, timeout=10) as client:
        r = client.post("/v1/chat/completions", content=bomb,
                        headers={"Content-Type": "application/json",
                                 "Content-Encoding": "gzip"})  # fmt: skip
        assert_envelope(r, 413)
        assert r.headers["Connection"] == "close"
        again = client.post("/v1/chat/completions", json=chat())
        assert again.status_code == 200, again.text


@pytest.mark.parametrize(
    ("message", "why"),
    [
        ({"role": "user"}, "a user message needs content"),
        ({"role": "user", "content": None}, "a user message needs content"),
        ({"role": "system"}, "a system message needs content"),
        ({"role": "tool", "tool_call_id": "c1"}, "a tool message needs content"),
    ],
)
def test_a_message_without_content_is_a_400_as_openai_answers(
    server: Server, message: dict[str, Any], why: str
) -> None:
    body = {"model": "fake", "messages": [message]}
    error = assert_envelope(post_raw(server, "/v1/chat/completions", json.dumps(body).encode()),
                            400, "messages")  # fmt: skip
    assert why in error["message"]


def test_an_assistant_message_of_calls_alone_needs_no_content(server: Server) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "done"}]  # fmt: skip
    r = httpx.post(server.url + "/v1/chat/completions", timeout=10,
                   json={"model": "fake", "messages": messages})  # fmt: skip
    assert r.status_code == 200, r.text


def test_authorization_bytes_that_are_not_utf8_get_a_401_envelope(server: Server) -> None:
    r = httpx.get(server.url + "/admin/api/engines", timeout=10,
                  headers={b"Authorization": b"Bearer \xff\xfe\xfd"})  # fmt: skip
    assert_envelope(r, 401)
    assert r.headers["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_the_bearer_scheme_is_case_insensitive(server: Server, scheme: str) -> None:
    r = httpx.get(server.url + "/admin/api/engines", timeout=10,
                  headers={"Authorization": f"{scheme} {KEY}"})  # fmt: skip
    assert r.status_code == 200, r.text


def test_every_route_answers_errors_as_envelopes(server: Server) -> None:
    assert_envelope(httpx.get(server.url + "/no/such/route", timeout=10), 404)
    assert_envelope(httpx.post(server.url + "/healthz", timeout=10), 405)
    wrong = httpx.get(server.url + "/v1/chat/completions", timeout=10)
    assert_envelope(wrong, 405)
    assert wrong.headers["Allow"] == "POST"  # RFC 9110: a 405 names the methods allowed
    assert_envelope(httpx.get(server.url + "/admin/api/nothing", timeout=10,
                              headers={"Authorization": f"Bearer {KEY}"}), 404)  # fmt: skip


def test_a_request_aiohttp_cannot_parse_is_a_400_and_one_log_line(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Bad: \x00\r\n\r\n")
        answer = sock.recv(4096)
    # aiohttp answers a request it cannot parse itself (before any handler or middleware)
    assert answer.split(b"\r\n", 1)[0].endswith(b" 400 Bad Request"), answer
    wait_for(lambda: "was answered 400: Invalid header value char" in server.log())


def test_client_errors_leave_no_traceback_in_the_log(server: Server) -> None:
    # runs after the tests above in this module, which sent every kind of bad request
    assert "Traceback" not in server.log()
    assert "Error handling request" not in server.log()


def test_a_wrong_token_hello_is_counted_and_a_flood_of_bad_frames_is_logged_sparingly(
    server: Server,
) -> None:
    before = server.health()["dropped_bus_frames"]
    flood = 2_000
    with intruder(server.bus_endpoint()) as peer:
        peer.send_multipart(encode(Hello("intruder", 1, 1, "cpu", ["fake"], 4, token="guess")))
        assert peer.poll(5000), "a HELLO with a wrong token is answered with REFUSE"
        assert peer.recv_multipart()[1][0] == MsgType.REFUSE
        wait_for(lambda: server.health()["dropped_bus_frames"] == before + 1)
        for _ in range(flood):
            peer.send_multipart([MAGIC, bytes([MsgType.CHUNKS]), msgpack.packb({"deltas": 1})])
        wait_for(lambda: server.health()["dropped_bus_frames"] == before + 1 + flood)
    lines = [line for line in server.log().splitlines() if "dropped a bus frame" in line]
    # at most one line per throttle interval (10 s) while the flood lasted, plus the first
    assert 1 <= len(lines) <= 3, lines
    assert free_slots(server) == SLOTS


def test_a_missing_runtime_dir_is_a_clear_error_not_a_traceback(tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / "config.json").write_text("{}")
    result = subprocess.run(
        [sys.executable, "-m", "coderai", "run", "--config", str(tmp_path / "config.json")],
        capture_output=True, text=True, timeout=30,
        env={"PATH": "/usr/bin:/bin", "CODERAI_RUNTIME_DIR": str(tmp_path / "missing")},
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "CODERAI_RUNTIME_DIR" in result.stderr
    assert "Traceback" not in result.stderr


NOT_BUILT_VALUES = [
    ("functions", [{"name": "f", "parameters": {}}]),
    ("function_call", "auto"),
    ("web_search_options", {}),
    ("verbosity", "high"),
    ("service_tier", "flex"),
    ("store", True),
]


@pytest.mark.parametrize(("param", "value"), NOT_BUILT_VALUES)
def test_an_openai_parameter_not_built_yet_is_refused_by_name(
    server: Server, param: str, value: Any
) -> None:
    r = httpx.post(server.url + "/v1/chat/completions", json=chat(**{param: value}), timeout=10)
    error = assert_envelope(r, 400, param)
    assert param in error["message"]


@pytest.mark.parametrize(
    ("param", "value"),
    [("best_of", 2), ("logprobs", 6), ("n", 0), ("response_format", {"type": "json_object"}),
     ("tools", [{"type": "function", "function": {"name": "f"}}]), ("tool_choice", "auto"),
     ("top_logprobs", 2)],
)  # fmt: skip
def test_a_completions_parameter_not_built_yet_or_out_of_range_is_refused_by_name(
    server: Server, param: str, value: Any
) -> None:
    body = {"model": "fake", "prompt": "x", param: value}
    assert_envelope(httpx.post(server.url + "/v1/completions", json=body, timeout=10), 400, param)


def test_values_that_ask_nothing_are_accepted(server: Server) -> None:
    idle: dict[str, Any] = {"tools": [], "tool_choice": "none", "response_format": {"type": "text"},
            "logprobs": False, "top_logprobs": 0, "store": False, "user": "someone",
            "presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}}  # fmt: skip
    r = httpx.post(server.url + "/v1/chat/completions", json=chat(**idle), timeout=10)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("param", "value"),
    [("logit_bias", {"abc": 1}), ("logit_bias", {"5": 101}), ("logit_bias", {"²": 1}),
     ("logit_bias", {"5" * 5000: 1}), ("presence_penalty", 2.5), ("frequency_penalty", -3)],
)  # fmt: skip
def test_penalties_and_bias_out_of_range_are_refused(
    server: Server, param: str, value: Any
) -> None:
    r = httpx.post(server.url + "/v1/chat/completions", json=chat(**{param: value}), timeout=10)
    assert_envelope(r, 400, param)


def test_an_image_that_is_no_image_is_named_not_refused(server: Server) -> None:
    """Bytes that are no image (or base64 that does not decode) must not end a session
    that resends them every turn: the model reads a placeholder saying so."""
    for url in ("data:image/png;base64,AAAA", "data:image/png;base64,%%%"):
        image = {"type": "image_url", "image_url": {"url": url}}
        content = [{"type": "text", "text": "what is this?"}, image]
        body = {"model": "fake", "messages": [{"role": "user", "content": content}]}
        r = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=10)
        assert r.status_code == 200, r.text
        assert r.headers["X-CoderAI-Media-Replaced"] == "image (unreadable)"


def test_a_developer_message_is_a_system_message_to_the_model(server: Server) -> None:
    def text(role: str) -> str:
        messages = [{"role": role, "content": "be brief"}, {"role": "user", "content": "hi"}]
        r = httpx.post(server.url + "/v1/chat/completions", timeout=10,
                       json={"model": "fake", "messages": messages})  # fmt: skip
        assert r.status_code == 200, r.text
        content: str = r.json()["choices"][0]["message"]["content"]
        return content

    assert text("developer") == text("system") != text("user")


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ({"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]}, "function"),
        ({"role": "tool", "content": "42"}, "tool_call_id"),
        (
            {
                "role": "user",
                "content": "hi",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            "only an assistant",
        ),
        ({"role": "user", "content": "hi", "name": "bob"}, "name"),
        ({"role": "user", "content": [{"type": "input_text", "text": "x"}]}, "'input_text'"),
    ],
)
def test_message_fields_not_built_yet_or_malformed_are_refused_by_name(
    server: Server, message: dict[str, Any], expected: str
) -> None:
    body = {"model": "fake", "messages": [message]}
    r = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=10)
    error = assert_envelope(r, 400, "messages")
    assert expected in error["message"]


def test_an_earlier_refusal_part_is_read_as_text(server: Server) -> None:
    def answer(earlier: Any) -> str:
        messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": earlier},
                    {"role": "user", "content": "ok"}]  # fmt: skip
        r = httpx.post(server.url + "/v1/chat/completions", timeout=10,
                       json={"model": "fake", "messages": messages})  # fmt: skip
        assert r.status_code == 200, r.text
        content: str = r.json()["choices"][0]["message"]["content"]
        return content

    assert answer([{"type": "refusal", "refusal": "I cannot"}]) == answer("I cannot")


def test_an_embeddings_parameter_not_built_yet_is_refused_by_name(server: Server) -> None:
    body = {"model": "fake", "input": "x", "dimensions": 32}
    r = httpx.post(server.url + "/v1/embeddings", json=body, timeout=10)
    assert_envelope(r, 400, "dimensions")
