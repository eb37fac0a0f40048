"""Clients that read slowly, or not at all, cost the front a bounded amount of memory:
past server.stream_backlog_chars the engine holds the sequence, and past
server.stream_stall_timeout the stream ends with an error event and frees its slot."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import httpx
import psutil
import pytest

from tests.integration.conftest import StartServer
from tests.support.server import Server, wait_for
from tests.support.sse import DONE, events

BACKLOG = 64 * 1024
#: 64 characters a token: the stream carries bytes ~12x faster than the plain words would
FAST = {"id": "fast", "format": "fake",
        "options": {"output_tokens": 10_000_000, "token_chars": 64}}  # fmt: skip
BODY = {"model": "fast", "prompt": "p", "max_tokens": 10_000_000, "stream": True}


def open_stream(srv: Server, body: dict[str, Any] = BODY) -> socket.socket:
    """A raw streaming request whose reader takes bytes only when told to."""
    sock = socket.socket()
    # a small receive window: the server's writes back up after a few kilobytes
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", srv.port))
    payload = json.dumps(body).encode()
    sock.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%b" % (len(payload), payload)
    )
    return sock


def read_to_end(sock: socket.socket) -> bytes:
    """Everything the front still sends; it closes the connection once this is read."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    sock.settimeout(20)
    data = b""
    while chunk := sock.recv(1 << 16):
        data += chunk
    return data


def read_stream(sock: socket.socket) -> bytes:
    """Everything the front sends until the stream's last chunk (it keeps the connection
    open for the client's next request); a stream that stops short times the read out."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    sock.settimeout(20)
    data = bytearray()
    while not data.endswith(b"\r\n0\r\n\r\n"):
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    return bytes(data)


def dechunked(response: bytes) -> bytes:
    """The body of a raw HTTP response sent in chunks (as every stream is)."""
    _, _, rest = response.partition(b"\r\n\r\n")
    body = bytearray()
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return bytes(body)
        body += rest[:size]
        rest = rest[size + 2 :]


def front_rss(srv: Server) -> int:
    return int(psutil.Process(srv.proc.pid).memory_info().rss)


def free_slots(srv: Server) -> int:
    return int(srv.health()["engines"][0]["free_slots"])


def holds(srv: Server) -> float:
    for line in httpx.get(srv.url + "/metrics", timeout=5).text.splitlines():
        if line.startswith("coderai_stream_holds_total "):
            return float(line.split()[1])
    raise AssertionError("no coderai_stream_holds_total in /metrics")


def test_slow_readers_hold_the_front_to_its_backlog_cap(start_server: StartServer) -> None:
    streams = 4
    srv = start_server({"stream_backlog_chars": BACKLOG, "max_parallel_requests": streams},
                       [FAST])  # fmt: skip
    socks = [open_stream(srv) for _ in range(streams)]
    try:
        # first each stream fills its socket's send buffer, which loopback TCP grows up to
        # tcp_wmem's maximum (4 MiB here): ~9 s for the four with plain words
        wait_for(lambda: holds(srv) >= streams, timeout=60)
        # what the engine made while the hold was on its way is the front's to keep until
        # its client reads it: a one-off step (2-30 MiB here, more on a busier machine).
        # From here on, held streams must not grow the front
        baseline = front_rss(srv)
        peak = baseline
        end = time.monotonic() + 4
        while time.monotonic() < end:  # each reads ~1 KB/s: far slower than the engine
            for sock in socks:
                sock.recv(100)
            peak = max(peak, front_rss(srv))
            time.sleep(0.1)
    finally:
        for sock in socks:
            sock.close()
    # per stream: the text held while the hold took effect, its rendering, and aiohttp's
    # write buffer (all ~BACKLOG), plus the allocator's slack; unbounded, 4 fast streams
    # grew the front ~6 MB/s here (24 MB over these 4 s)
    growth = peak - baseline
    assert growth < streams * 4 * BACKLOG + 4 * 2**20, f"front grew {growth / 2**20:.1f} MiB"
    # the engine held them instead of racing ahead, and closing them freed their slots
    wait_for(lambda: free_slots(srv) == streams)


def test_a_held_stream_goes_on_once_its_client_catches_up_and_ends_whole(
    start_server: StartServer,
) -> None:
    """Past the backlog the engine holds the stream; once its client has read what waited,
    the front sends RESUME and the stream goes on to its last token and [DONE]. Were the
    RESUME never sent, the stream would wait forever: the read below would time out."""
    tokens = 120_000  # 7.7 MB: more than the sockets' buffers take, so it is held
    srv = start_server({"stream_backlog_chars": BACKLOG, "max_parallel_requests": 1}, [FAST])
    sock = open_stream(srv, {**BODY, "max_tokens": tokens})
    try:
        wait_for(lambda: holds(srv) >= 1, timeout=60)
        data = read_stream(sock)
    finally:
        sock.close()
    streamed = events(dechunked(data))
    assert streamed[-1] == DONE
    text = "".join(e["choices"][0]["text"] for e in streamed[:-1])
    assert len(text) == tokens * 64
    wait_for(lambda: free_slots(srv) == 1)


@pytest.mark.parametrize(
    ("tokens", "backlog", "stall"),
    [
        (10_000_000, BACKLOG, 3.0),  # the stream is held, then cut at the stall deadline
        # never held, and the stall deadline is long: the whole answer (7.7 MB, more than
        # the socket's buffers take; ~2.5 s to make here) and its DONE reach the front
        # while it waits to write, and the stream must still end with an error
        (120_000, 64 * 2**20, 8.0),
    ],
)
def test_a_client_that_stops_reading_gets_an_error_event_and_frees_its_slot(
    start_server: StartServer, tokens: int, backlog: int, stall: float
) -> None:
    srv = start_server({"stream_stall_timeout": stall, "stream_backlog_chars": backlog,
                        "max_parallel_requests": 2}, [FAST])  # fmt: skip
    sock = open_stream(srv, {**BODY, "max_tokens": tokens})
    try:
        wait_for(lambda: free_slots(srv) == 1)
        if backlog > tokens * 64:
            # the engine finished (its slot is free) while the stream still waits to write
            wait_for(lambda: free_slots(srv) == 2, timeout=stall)
            assert "its client read nothing" not in srv.log()
        wait_for(lambda: "its client read nothing" in srv.log(), timeout=stall * 4 + 5)
        wait_for(lambda: free_slots(srv) == 2)
        # whatever the client reads now ends with the error event and the terminator
        data = read_to_end(sock)
    finally:
        sock.close()
    assert data.endswith(b"\r\n0\r\n\r\n")
    assert events(data)[-1]["error"]["code"] == "stream_stalled"


def test_a_stalled_client_of_several_choices_gets_an_error_event_and_frees_every_slot(
    start_server: StartServer,
) -> None:
    """n choices stream through one handler: each is held past the backlog, and when the
    client reads nothing past the stall deadline every choice's slot is freed."""
    srv = start_server({"stream_stall_timeout": 3.0, "stream_backlog_chars": BACKLOG,
                        "max_parallel_requests": 3}, [FAST])  # fmt: skip
    sock = open_stream(srv, {**BODY, "n": 2})
    try:
        wait_for(lambda: free_slots(srv) == 1)
        wait_for(lambda: holds(srv) >= 2)
        wait_for(lambda: "its client read nothing" in srv.log(), timeout=3.0 * 4 + 5)
        wait_for(lambda: free_slots(srv) == 3)
        data = read_to_end(sock)
    finally:
        sock.close()
    assert data.endswith(b"\r\n0\r\n\r\n")
    assert events(data)[-1]["error"]["code"] == "stream_stalled"


def test_a_whole_response_is_never_held(start_server: StartServer) -> None:
    """A non-streamed answer takes its text as it arrives, however much comes at once; a
    hold would have nobody to resume it."""
    srv = start_server({"stream_backlog_chars": 1024}, [FAST])
    body = {**BODY, "max_tokens": 20_000, "stream": False}
    r = httpx.post(srv.url + "/v1/completions", json=body, timeout=50)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 20_000
    assert holds(srv) == 0
