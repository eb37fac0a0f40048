"""The console's guards against a real `coderai run`: admin routes, sessions and CSRF,
wrong passwords, and API keys on /v1 with their scopes, limits and usage."""

from __future__ import annotations

import asyncio
import contextlib
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import openapi_spec_validator
import pytest

from coderai.catalogue.entries import Catalogue
from coderai.config import Config, StateFiles
from coderai.front.app import build_app
from coderai.front.auth.gate import ADMIN_OPEN, CHANGING, SESSION_RECHECK_SECONDS
from coderai.front.server import assemble
from tests.support.server import Server, wait_for
from tests.support.sse import Frame, iter_frames

KEY = "admin-key-for-tests"
PASSWORD = "a-long-password"
SLOW = {"tokens_per_second": 20, "output_tokens": 10_000}
MODELS: list[dict[str, Any]] = [
    {"id": "small", "format": "fake", "options": {"output_tokens": 8}},
    {"id": "other", "format": "fake", "options": {"output_tokens": 8}},
    {"id": "slow", "format": "fake", "options": SLOW},
]


def coderai(workdir: Path, *args: str, stdin: str = "") -> str:
    done = subprocess.run(
        [sys.executable, "-m", "coderai", *args, "--config", str(workdir / "config.json")],
        input=stdin, capture_output=True, text=True, check=True, cwd=workdir,
    )  # fmt: skip
    return done.stdout


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    workdir = tmp_path_factory.mktemp("console")
    auth = {"admin_key": KEY, "require_api_key": True}
    server = Server(workdir, {"engines": 1}, MODELS, extra_config={"auth": auth})
    try:
        server.wait_ready(1)
        # made while the front runs: it reads the same database
        coderai(workdir, "users", "add", "admin", "--password-stdin", stdin=PASSWORD + "\n")
        yield server
    finally:
        server.stop()


Sdk = Callable[[str], openai.OpenAI]


@pytest.fixture
def sdk(srv: Server) -> Iterator[Sdk]:
    """Official clients of the module's server with a given key, closed after the test."""
    made: list[openai.OpenAI] = []

    def make(api_key: str) -> openai.OpenAI:
        made.append(openai.OpenAI(base_url=srv.url + "/v1", api_key=api_key, max_retries=0))
        return made[-1]

    yield make
    for client in made:
        client.close()


def admin(srv: Server) -> httpx.Client:
    return httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {KEY}"})


@contextlib.contextmanager
def logged_in(srv: Server) -> Iterator[tuple[httpx.Client, str]]:
    """A client holding a console session, and the session's CSRF token."""
    with httpx.Client(base_url=srv.url) as client:
        answer = client.post("/admin/api/login", json={"username": "admin", "password": PASSWORD})
        assert answer.status_code == 200, answer.text
        yield client, answer.json()["csrf"]


def new_key(srv: Server, **fields: Any) -> dict[str, Any]:
    with admin(srv) as client:
        answer = client.post("/admin/api/keys", json={"name": "test", **fields})
    assert answer.status_code == 201, answer.text
    body: dict[str, Any] = answer.json()
    return body


def app_routes(tmp_path: Path) -> list[tuple[str, str]]:
    """Every route, read from the router of the app `coderai run` builds (built on a
    loop, as `coderai run` builds it; never started)."""

    async def build() -> list[tuple[str, str]]:
        config = Config()
        files = StateFiles.of(config, tmp_path / "c.json")
        front = assemble(config, files, Catalogue([]), {}, "")
        app = build_app(front, KEY)
        front.dispatcher.context.term()
        return sorted({(r.method, r.resource.canonical) for r in app.router.routes() if r.resource})

    return asyncio.run(build())


def test_no_admin_route_answers_without_a_session_or_the_key(srv: Server, tmp_path: Path) -> None:
    routes = [r for r in app_routes(tmp_path) if r[1].startswith("/admin/api/")]
    assert ("GET", "/admin/api/keys") in routes and len(routes) > 20
    with httpx.Client(base_url=srv.url) as client:
        for method, path in routes:
            if (method, path) in ADMIN_OPEN:
                continue
            url = re.sub(r"\{[^}]*\}", "x", path)
            for headers in ({}, {"Authorization": "Bearer wrong-key"}):
                # a body only where one belongs; a new connection for each (a refused
                # request's unread body closes its connection)
                body: dict[str, Any] | None = {} if method in CHANGING else None
                headers = {**headers, "Connection": "close"}
                answer = client.request(method, url, headers=headers, json=body)
                assert answer.status_code == 401, (method, path, answer.text)
                if method != "HEAD":
                    assert answer.json()["error"]["type"] == "authentication_error"


def test_the_served_description_is_valid_openapi_and_covers_every_route(
    srv: Server, tmp_path: Path
) -> None:
    answer = httpx.get(srv.url + "/admin/api/openapi.json")  # readable without credentials
    assert answer.status_code == 200
    document = answer.json()
    openapi_spec_validator.validate(document)
    described = {(m.upper(), p) for p, ops in document["paths"].items() for m in ops}
    served = {
        (method, re.sub(r"\{(\w+):[^}]*\}", r"{\1}", path))
        for method, path in app_routes(tmp_path)
        if method != "HEAD" and path != "/" and not path.startswith("/ui/")
    }
    assert described == served
    # what it says about credentials is what the server does
    for method, path in described:
        security = document["paths"][path][method.lower()]["security"]
        if (method, path) in ADMIN_OPEN or path in ("/healthz", "/health", "/metrics"):
            assert security == [], path
        elif path.startswith("/admin/api/"):
            assert security == [{"bearer": []}, {"session": []}], path
        else:
            assert {} in security, path  # a key is optional where keys are not required


def test_a_login_sets_an_http_only_strict_cookie_and_returns_the_csrf_token(
    srv: Server,
) -> None:
    with httpx.Client(base_url=srv.url) as client:
        answer = client.post("/admin/api/login", json={"username": "admin", "password": PASSWORD})
        assert answer.status_code == 200
        cookie = answer.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
        assert "Secure" not in cookie  # served over plain HTTP here
        assert "Max-Age=43200" in cookie  # auth.session_hours, 12 by default
        session = client.get("/admin/api/session").json()
        assert session["user"] == "admin" and session["csrf"] == answer.json()["csrf"]
        assert client.get("/admin/api/engines").status_code == 200


def test_a_change_with_a_session_needs_its_csrf_token(srv: Server) -> None:
    with logged_in(srv) as (client, csrf):
        body = {"name": "csrf-test"}
        assert client.post("/admin/api/keys", json=body).status_code == 403
        bad = client.post("/admin/api/keys", json=body, headers={"X-CSRF-Token": csrf + "x"})
        assert bad.status_code == 403
        assert bad.json()["error"]["type"] == "permission_error"
        good = client.post("/admin/api/keys", json=body, headers={"X-CSRF-Token": csrf})
        assert good.status_code == 201


def test_a_cookie_from_before_logout_is_refused(srv: Server) -> None:
    with logged_in(srv) as (client, csrf):
        cookie = client.cookies["coderai_session"]
        assert client.post("/admin/api/logout", headers={"X-CSRF-Token": csrf}).status_code == 204
    with httpx.Client(base_url=srv.url, cookies={"coderai_session": cookie}) as replay:
        assert replay.get("/admin/api/session").status_code == 401
        assert replay.get("/admin/api/keys").status_code == 401


def test_a_wrong_password_and_an_unknown_user_are_refused_alike(srv: Server) -> None:
    with httpx.Client(base_url=srv.url) as client:
        wrong = client.post("/admin/api/login", json={"username": "admin", "password": "nope"})
        nobody = client.post("/admin/api/login", json={"username": "eve", "password": "nope"})
        assert wrong.status_code == nobody.status_code == 401
        assert wrong.json() == nobody.json()
        assert "coderai_session" not in client.cookies
        assert client.post("/admin/api/login", json={"username": "admin"}).status_code == 400
    # a right login clears the failures counted for this address
    with logged_in(srv):
        pass


def test_v1_refuses_a_request_without_a_key_when_keys_are_required(sdk: Sdk, srv: Server) -> None:
    client = sdk("not-a-key")
    with pytest.raises(openai.AuthenticationError) as refused:
        client.models.list()
    assert refused.value.status_code == 401
    body = httpx.post(srv.url + "/v1/messages", json={}).json()
    assert body["type"] == "error" and body["error"]["type"] == "authentication_error"


def test_a_key_works_from_the_openai_client_and_its_usage_is_recorded(
    sdk: Sdk, srv: Server
) -> None:
    key = new_key(srv)
    client = sdk(key["key"])
    reply = client.chat.completions.create(
        model="small", messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.usage is not None and reply.usage.completion_tokens == 8
    stream = client.chat.completions.create(
        model="small", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    def recorded() -> dict[str, Any] | None:
        with admin(srv) as c:
            rows = c.get("/admin/api/usage").json()["usage"]
        mine = [r for r in rows if r["key_id"] == key["id"]]
        return mine[0] if mine and mine[0]["requests"] == 2 else None

    wait_for(lambda: recorded() is not None)
    row = recorded()
    assert row is not None
    assert row["model"] == "small" and row["key"] == "test"
    assert row["completion_tokens"] == 16 and row["prompt_tokens"] > 0
    with admin(srv) as c:
        listed = {k["id"]: k for k in c.get("/admin/api/keys").json()["keys"]}
    assert listed[key["id"]]["last_used_at"] is not None
    assert "key" not in listed[key["id"]]  # the secret is shown once, at creation


def test_a_key_limited_to_one_model_gets_403_on_another(sdk: Sdk, srv: Server) -> None:
    key = new_key(srv, models=["small"])
    client = sdk(key["key"])
    assert [m.id for m in client.models.list()] == ["small"]
    with pytest.raises(openai.PermissionDeniedError) as refused:
        client.chat.completions.create(model="other", messages=[{"role": "user", "content": "x"}])
    assert refused.value.status_code == 403
    assert "other" in refused.value.message
    client.chat.completions.create(model="small", messages=[{"role": "user", "content": "x"}])


def test_requests_over_a_keys_rate_get_429_with_retry_after(srv: Server) -> None:
    key = new_key(srv, rpm=2)
    headers = {"Authorization": f"Bearer {key['key']}"}
    body = {"model": "small", "messages": [{"role": "user", "content": "x"}]}
    answers = [httpx.post(srv.url + "/v1/chat/completions", json=body, headers=headers)
               for _ in range(3)]  # fmt: skip
    assert [a.status_code for a in answers] == [200, 200, 429]
    refused = answers[2]
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"


def test_a_keys_concurrent_streams_are_limited_while_one_runs(sdk: Sdk, srv: Server) -> None:
    key = new_key(srv, max_concurrent=1)
    client = sdk(key["key"])
    first = client.chat.completions.create(
        model="slow", messages=[{"role": "user", "content": "x"}], stream=True, max_tokens=50
    )
    next(iter(first))  # it runs
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="small", messages=[{"role": "user", "content": "x"}])
    first.close()
    # its slot is given back when the stream ends
    wait_for(lambda: _completes(client))


def _completes(client: openai.OpenAI) -> bool:
    try:
        client.chat.completions.create(model="small", messages=[{"role": "user", "content": "x"}])
    except openai.RateLimitError:
        return False
    return True


def test_tokens_per_minute_refuse_once_the_minutes_tokens_are_spent(sdk: Sdk, srv: Server) -> None:
    key = new_key(srv, tpm=10)  # one answer of 8 tokens plus its prompt spends it
    client = sdk(key["key"])
    client.chat.completions.create(model="small", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model="small", messages=[{"role": "user", "content": "x"}])
    assert "tokens per minute" in refused.value.message


def test_a_revoked_key_stops_working_at_once(sdk: Sdk, srv: Server) -> None:
    key = new_key(srv)
    client = sdk(key["key"])
    client.models.list()
    with admin(srv) as c:
        assert c.delete(f"/admin/api/keys/{key['id']}").status_code == 204
    with pytest.raises(openai.AuthenticationError):
        client.models.list()


def test_a_key_from_the_command_line_works_and_no_key_is_ever_logged(sdk: Sdk, srv: Server) -> None:
    token = coderai(srv.workdir, "keys", "create", "cli-key", "--models", "small").strip()
    client = sdk(token)
    client.chat.completions.create(model="small", messages=[{"role": "user", "content": "x"}])
    wrong = token[:-4] + "AAAA" if not token.endswith("AAAA") else token[:-4] + "BBBB"
    refused = httpx.get(srv.url + "/v1/models", headers={"Authorization": f"Bearer {wrong}"})
    assert refused.status_code == 401
    secret = token.split("-", 2)[2]
    log = srv.log()
    assert secret not in log and wrong.split("-", 2)[2] not in log


def test_activity_shows_a_running_request_then_its_outcome(sdk: Sdk, srv: Server) -> None:
    key = new_key(srv)
    client = sdk(key["key"])
    stream = client.chat.completions.create(
        model="slow", messages=[{"role": "user", "content": "x"}], stream=True, max_tokens=4
    )
    chunks = iter(stream)
    next(chunks)

    def activity() -> dict[str, Any]:
        with admin(srv) as c:
            body: dict[str, Any] = c.get("/admin/api/activity").json()
        return body

    running = [r for r in activity()["running"] if r["key"] == "test" and r["model"] == "slow"]
    assert len(running) == 1 and running[0]["outcome"] == "running"
    assert running[0]["engine"] is not None and running[0]["ttft_ms"] is not None
    for _ in chunks:
        pass
    ended = next(r for r in activity()["recent"] if r["id"] == running[0]["id"])
    assert ended["outcome"] == "completed" and ended["status"] == 200 and ended["stream"]
    assert ended["completion_tokens"] == 4 and ended["duration_ms"] >= ended["ttft_ms"]


def listen_to_feed(srv: Server, events: list[tuple[str, Any]], done: threading.Event) -> None:
    """Read the admin feed on a thread into `events` ((name, data) in order) until `done`
    is set (checked as each event arrives)."""

    def listen() -> None:
        with admin(srv) as c, c.stream("GET", "/admin/api/events", timeout=30) as feed:
            for frame in iter_frames(feed.iter_bytes()):
                if frame.comment is None:
                    events.append((frame.name, frame.json()))
                if done.is_set():
                    return

    threading.Thread(target=listen, daemon=True).start()


def test_the_live_feed_sends_snapshots_then_each_request(sdk: Sdk, srv: Server) -> None:
    events: list[tuple[str, Any]] = []
    done = threading.Event()
    listen_to_feed(srv, events, done)
    wait_for(lambda: {"engines", "activity"} <= {n for n, _ in events})
    key = new_key(srv, name="snapshots")
    sdk(key["key"]).chat.completions.create(
        model="small", messages=[{"role": "user", "content": "x"}]
    )

    def outcomes() -> list[str]:
        return [d["outcome"] for n, d in events if n == "request" and d["key"] == "snapshots"]

    wait_for(lambda: "completed" in outcomes())
    done.set()
    assert outcomes()[0] == "running" and outcomes()[-1] == "completed"
    engines = next(d for n, d in events if n == "engines")
    assert [e["name"] for e in engines["engines"]] == [srv.health()["engines"][0]["name"]]


@contextlib.contextmanager
def guarded(folder: Path, delay: float) -> Iterator[Server]:
    """A server whose console locks after 3 wrong passwords, with its user "admin"."""
    auth = {"admin_key": KEY, "login_delay_seconds": delay, "login_max_failures": 3,
            "login_lock_seconds": 600}  # fmt: skip
    server = Server(folder, {"engines": 1}, MODELS[:1], extra_config={"auth": auth})
    try:
        server.wait_ready(1)
        coderai(server.workdir, "users", "add", "admin", "--password-stdin", stdin=PASSWORD)
        yield server
    finally:
        server.stop()


def test_wrong_passwords_are_slowed_then_locked(tmp_path: Path) -> None:
    with guarded(tmp_path / "lock", 0.2) as server, httpx.Client(base_url=server.url) as client:
        took = []
        for _ in range(3):
            started = time.monotonic()
            wrong = client.post(
                "/admin/api/login", json={"username": "admin", "password": "wrong-one"}
            )
            took.append(time.monotonic() - started)
            assert wrong.status_code == 401
        # each attempt after a failure waits longer than the one before, by the step
        assert took[1] >= 0.2 and took[2] >= 0.4
        login = {"username": "admin", "password": PASSWORD}
        right = client.post("/admin/api/login", json=login)
        assert right.status_code == 429
        assert 500 < int(right.headers["Retry-After"]) <= 600
        assert right.json()["error"]["code"] == "login_locked"


def test_a_stranger_guessing_cannot_lock_the_admin_out_from_elsewhere(tmp_path: Path) -> None:
    """Failures lock the address they come from (here 127.0.0.2, another loopback address),
    not the user: the admin at 127.0.0.1 still logs in at once."""
    with guarded(tmp_path / "stranger", 0.05) as server:
        wrong = {"username": "admin", "password": "guess"}
        stranger = httpx.HTTPTransport(local_address="127.0.0.2")
        with httpx.Client(base_url=server.url, transport=stranger) as client:
            for _ in range(3):
                assert client.post("/admin/api/login", json=wrong).status_code == 401
            locked = client.post("/admin/api/login", json=wrong)
            assert locked.status_code == 429
        with httpx.Client(base_url=server.url) as admin:
            right = admin.post("/admin/api/login",
                               json={"username": "admin", "password": PASSWORD})  # fmt: skip
            assert right.status_code == 200, right.text


def test_a_session_expires_after_its_configured_time(tmp_path: Path) -> None:
    hours = 0.001  # 3.6 s: the login and a first read take well under a second
    auth = {"admin_key": KEY, "session_hours": hours}
    server = Server(tmp_path / "expiry", {"engines": 1}, MODELS[:1], extra_config={"auth": auth})
    try:
        server.wait_ready(1)
        coderai(server.workdir, "users", "add", "admin", "--password-stdin", stdin=PASSWORD)
        with logged_in(server) as (client, _):
            cookie = client.cookies["coderai_session"]
        # sent by hand: a cookie jar drops it on its own (whole-second) clock, and this
        # is about when the server refuses it
        headers = {"Cookie": f"coderai_session={cookie}"}

        def status() -> int:
            return httpx.get(server.url + "/admin/api/session", headers=headers).status_code

        session = httpx.get(server.url + "/admin/api/session", headers=headers)
        assert session.status_code == 200
        expires_at = session.json()["expires_at"]
        wait_for(lambda: status() == 401, timeout=hours * 3600 + 10)
        # refused once its time was up, not before (one machine, one clock)
        assert time.time() >= expires_at
    finally:
        server.stop()


def test_a_live_stream_ends_when_its_session_is_logged_out(srv: Server) -> None:
    with logged_in(srv) as (client, csrf):
        cookie = client.cookies["coderai_session"]
        ended = threading.Event()
        received: list[Frame] = []

        def listen() -> None:
            with (
                contextlib.suppress(httpx.HTTPError),
                httpx.Client(base_url=srv.url, cookies={"coderai_session": cookie}) as c,
                c.stream("GET", "/admin/api/events", timeout=60) as feed,
            ):
                for frame in iter_frames(feed.iter_bytes()):
                    received.append(frame)
            ended.set()

        listener = threading.Thread(target=listen, daemon=True)
        listener.start()
        wait_for(lambda: any(frame.name == "engines" for frame in received))
        assert not ended.is_set()
        assert client.post("/admin/api/logout", headers={"X-CSRF-Token": csrf}).status_code == 204
        assert ended.wait(SESSION_RECHECK_SECONDS + 5)


def test_a_stream_its_client_leaves_is_charged_the_tokens_it_used(sdk: Sdk, srv: Server) -> None:
    key = new_key(srv, tpm=6)
    client = sdk(key["key"])
    stream = client.chat.completions.create(
        model="slow", messages=[{"role": "user", "content": "x"}], stream=True
    )
    chunks = iter(stream)
    for _ in range(8):  # more tokens than the key's minute allows, then the client leaves
        next(chunks)
    stream.close()

    def refused() -> bool:
        try:
            client.models.list()  # costs no tokens; the limit is checked at admission
        except openai.RateLimitError as exc:
            return "tokens per minute" in exc.message
        return False

    wait_for(refused)
    with admin(srv) as c:
        wait_for(lambda: any(r["key_id"] == key["id"] and r["completion_tokens"] >= 7
                             for r in c.get("/admin/api/usage").json()["usage"]))  # fmt: skip


def test_status_answers_from_the_fronts_own_state(srv: Server) -> None:
    with admin(srv) as c:
        status = c.get("/admin/api/status").json()
    (engine,) = status["engines"]
    assert engine["state"] == "ready" and engine["rss"] > 0
    assert status["ram"]["total"] > status["ram"]["available"] > 0
    assert status["ram"]["engines_rss"] == engine["rss"]
    assert status["vram"] == {engine["name"]: None}  # a CPU engine reports no VRAM
    assert status["cooldowns"] == {} and status["queued"] == 0


def test_model_listings_are_not_listed_in_activity(sdk: Sdk, srv: Server) -> None:
    key = new_key(srv, name="listing")
    client = sdk(key["key"])
    client.models.list()
    client.chat.completions.create(model="small", messages=[{"role": "user", "content": "x"}])
    with admin(srv) as c:
        recent = c.get("/admin/api/activity").json()["recent"]
    mine = [r["route"] for r in recent if r["key"] == "listing"]
    assert "/v1/chat/completions" in mine and "/v1/models" not in mine


def test_the_feed_names_a_running_requests_engine_and_a_left_stream_as_cancelled(
    sdk: Sdk, srv: Server
) -> None:
    feed: list[tuple[str, Any]] = []
    done = threading.Event()
    listen_to_feed(srv, feed, done)
    key = new_key(srv, name="feed-key")
    stream = sdk(key["key"]).chat.completions.create(
        model="slow", messages=[{"role": "user", "content": "x"}], stream=True
    )
    chunks = iter(stream)
    next(chunks)

    def mine(outcome: str) -> list[dict[str, Any]]:
        requests = [d for n, d in feed if n == "request"]
        return [e for e in requests if e["key"] == "feed-key" and e["outcome"] == outcome]

    # within a heartbeat interval of its first output, the console knows where it runs
    wait_for(lambda: any(e["engine"] and e["model"] == "slow" for e in mine("running")))
    stream.close()
    wait_for(lambda: bool(mine("cancelled")))
    (ended,) = mine("cancelled")
    assert ended["stream"] and ended["status"] == 200 and ended["engine"]
    done.set()


def test_a_key_that_could_never_work_is_refused_at_creation(srv: Server) -> None:
    with admin(srv) as c:
        past = c.post("/admin/api/keys", json={"name": "old", "expires_at": 1.0})
        typo = c.post("/admin/api/keys", json={"name": "typo", "models": ["smal"]})
    assert past.status_code == 400 and past.json()["error"]["param"] == "expires_at"
    assert typo.status_code == 400 and "smal" in typo.json()["error"]["message"]


def test_a_token_that_is_not_a_key_is_told_so_where_keys_are_required(srv: Server) -> None:
    answer = httpx.get(srv.url + "/v1/models", headers={"Authorization": "Bearer sk-none"})
    assert answer.status_code == 401
    assert "not one" in answer.json()["error"]["message"]
