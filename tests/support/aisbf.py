"""A test-side AISBF broker, written from the documented protocol
(../shared/protocols/aisbf-broker.md): it takes a node's WebSocket, checks its identity,
answers its registration and heartbeats, and sends it requests, collecting the replies.

Where AISBF 0.99.92 is stricter than the protocol's letter, it is as strict:
- a streamed request (`"stream"` true in its payload) is relayed only its chunk-like events
  and ends only on `done` or `completed`; anything else sent for it is dropped, and its
  client waits on (here: until the call's timeout). A whole request ends on its first reply
  that is not one of those events.
- replies are handled on a task of their own, one at a time, each taking a few milliseconds
  (AISBF updates the session in its cache first); the socket's closing cancels that task,
  and what it had not handled is lost. Its answer to a heartbeat waits until it has handled
  all it read before: between real hosts the round trip gives AISBF that time.
- a registration on an open session replaces what the last one said, and the models are
  listed again.

It runs its own event loop in a thread; the tests call it synchronously.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from tests.support.server import free_port

MAX_FRAME = 16 * 1024 * 1024
PROVIDER, CLIENT, TOKEN = "node-a", "client-a", "reg-secret"
#: the events AISBF relays to a streamed request, and those of them that end it
STREAM_EVENTS = frozenset({"chunk", "progress", "output", "log", "data", "done", "completed"})
STREAM_ENDS = frozenset({"done", "completed"})
#: what handling one reply takes (so a close that follows within a millisecond cuts it)
HANDLING_SECONDS = 0.005
#: what a request's waiter is handed when the socket closes under it
CLOSED = {"status": "error", "event": "closed", "error": "socket closed"}


@dataclass
class Waiting:
    """A request sent to the node, waiting for its replies."""

    stream: bool
    replies: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)


@dataclass
class Session:
    ws: web.WebSocketResponse
    #: the last registration, which is what the broker keeps; and every one
    register: dict[str, Any] | None = None
    registrations: list[dict[str, Any]] = field(default_factory=list)
    heartbeats: list[dict[str, Any]] = field(default_factory=list)
    models: dict[str, Any] | None = None
    waiting: dict[str, Waiting] = field(default_factory=dict)
    #: replies read but not yet handled (see the module's docstring)
    inbox: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)
    #: replies that no waiting request took (a stream's error reply, a frame after `done`)
    dropped: list[dict[str, Any]] = field(default_factory=list)
    #: replies the socket's closing cut before they were handled
    lost: list[dict[str, Any]] = field(default_factory=list)
    close_code: int | None = None


def relayed(reply: dict[str, Any], stream: bool) -> bool:
    """Whether AISBF hands a reply to the request's client (keep-alives are shown here)."""
    if reply.get("status") == "pending":
        return True
    return (reply.get("event") in STREAM_EVENTS) == stream


def terminal(reply: dict[str, Any], stream: bool) -> bool:
    """Whether a relayed reply ends its request."""
    if reply is CLOSED:
        return True
    if stream:
        return reply.get("event") in STREAM_ENDS
    return reply.get("status") != "pending"


class AisbfPeer:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"ws://127.0.0.1:{self.port}/api/coderai/wss"
        self.sessions: list[Session] = []
        #: sockets open now for the client id, and the most ever open at once
        self.open = 0
        self.max_open = 0
        self.refused = 0
        #: handshakes that carried the token in their URL (which logs and errors quote)
        self.tokens_in_query = 0
        #: the registration token it takes (a test changes it to see a refusal)
        self.token = TOKEN
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._runner: web.AppRunner | None = None
        self.start()

    # --- control, from the test's thread ---

    def _do(self, coro: Any, timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> None:
        self._do(self._start())

    def stop(self) -> None:
        """The broker goes away: its sockets close (1001), its port stops listening."""
        self._do(self._stop())

    def close(self) -> None:
        self.stop()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()

    def call(self, op: str, payload: dict[str, Any], timeout: float = 30.0) -> list[dict[str, Any]]:
        """Send a request on the newest session; its replies up to the last one."""
        return self._do(self._call(op, payload), timeout)  # type: ignore[no-any-return]

    def begin(self, op: str, payload: dict[str, Any]) -> Any:
        """Send a request without waiting: a future of its replies."""
        return asyncio.run_coroutine_threadsafe(self._call(op, payload), self.loop)

    def send_raw(self, text: str) -> None:
        """Send a frame as is; a node that refuses it may close before it is all sent."""
        with contextlib.suppress(ConnectionError):
            self._do(self.sessions[-1].ws.send_str(text))

    def registered(self) -> int:
        return sum(s.register is not None and s.close_code is None for s in self.sessions)

    def capabilities(self) -> dict[str, Any]:
        """What the newest session's last registration says the node can run."""
        register = self.sessions[-1].register
        assert register is not None
        capabilities: dict[str, Any] = register["payload"]["capabilities"]
        return capabilities

    # --- the broker ---

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/api/coderai/wss", self._socket)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def _stop(self) -> None:
        for session in self.sessions:
            if not session.ws.closed:
                await session.ws.close(code=1001, message=b"broker restarting")
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        q, h = request.query, request.headers
        token = q.get("registration_token") or h.get("x-coderai-registration-token")
        self.tokens_in_query += "registration_token" in q
        if (q.get("provider_id"), q.get("client_id"), token) != (
            PROVIDER,
            CLIENT,
            self.token,
        ):
            self.refused += 1
            raise web.HTTPForbidden()
        ws = web.WebSocketResponse(max_msg_size=MAX_FRAME)
        await ws.prepare(request)
        session = Session(ws)
        self.sessions.append(session)
        self.open += 1
        self.max_open = max(self.max_open, self.open)
        handler = asyncio.get_running_loop().create_task(self._handle(session))
        try:
            await self._serve(session)
        finally:
            handler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await handler
            while not session.inbox.empty():
                session.lost.append(session.inbox.get_nowait())
            self.open -= 1
            session.close_code = ws.close_code or 1000
            for waiting in session.waiting.values():
                waiting.replies.put_nowait(CLOSED)
        return ws

    async def _serve(self, session: Session) -> None:
        ws = session.ws
        try:
            first = await ws.receive(timeout=30)
        except TimeoutError:
            await ws.close(code=1008)
            return
        message = json.loads(first.data) if first.type == WSMsgType.TEXT else {}
        if message.get("op") != "register":
            await ws.close(code=1008)
            return
        session_id = f"coderai_{uuid.uuid4().hex}"
        while True:
            if message.get("op") == "register":
                session.register = message
                session.registrations.append(message)
                await ws.send_json({"v": 1, "event": "registered", "status": "ok",
                                    "request_id": message["request_id"],
                                    "session_id": session_id})  # fmt: skip
                asyncio.get_running_loop().create_task(self._list_models(session))
            elif message.get("op") == "heartbeat":
                session.heartbeats.append(message)
                await session.inbox.join()
                await ws.send_json({"v": 1, "request_id": message["request_id"], "status": "ok",
                                    "event": "heartbeat", "payload": {"ts": 0}})  # fmt: skip
            else:
                session.inbox.put_nowait(message)
            msg = await ws.receive()
            if msg.type != WSMsgType.TEXT:
                return
            message = json.loads(msg.data)

    async def _handle(self, session: Session) -> None:
        while True:
            message = await session.inbox.get()
            try:
                await asyncio.sleep(HANDLING_SECONDS)
            except asyncio.CancelledError:
                session.lost.append(message)
                raise
            waiting = session.waiting.get(message.get("request_id", ""))
            if waiting is not None and relayed(message, waiting.stream):
                waiting.replies.put_nowait(message)
            else:
                session.dropped.append(message)
            session.inbox.task_done()

    async def _list_models(self, session: Session) -> None:
        replies = await self._request(session, "models.list", {})
        session.models = replies[-1]

    async def _call(self, op: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
        return await self._request(self.sessions[-1], op, payload)

    async def _request(
        self, session: Session, op: str, payload: dict[str, Any]
    ) -> list[dict[str, Any]]:
        rid = f"broker_{uuid.uuid4().hex}"
        waiting = session.waiting[rid] = Waiting(stream=bool(payload.get("stream")))
        await session.ws.send_json({"v": 1, "op": op, "request_id": rid, "provider_id": PROVIDER,
                                    "client_id": CLIENT, "payload": payload})  # fmt: skip
        replies = []
        while True:
            reply = await waiting.replies.get()
            replies.append(reply)
            if terminal(reply, waiting.stream):
                del session.waiting[rid]
                return replies
