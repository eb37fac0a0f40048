"""A test-side AISBF broker, written from the documented protocol
(../shared/protocols/aisbf-broker.md): it takes a node's WebSocket, checks its identity,
answers its registration and heartbeats, and sends it requests, collecting the replies.

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


@dataclass
class Session:
    ws: web.WebSocketResponse
    register: dict[str, Any] | None = None
    heartbeats: list[dict[str, Any]] = field(default_factory=list)
    models: dict[str, Any] | None = None
    replies: dict[str, asyncio.Queue[dict[str, Any]]] = field(default_factory=dict)
    close_code: int | None = None


def terminal(reply: dict[str, Any]) -> bool:
    """Whether a reply ends its request: an error, `done`, or a whole answer."""
    if reply.get("status") == "error" or reply.get("event") == "done":
        return True
    return reply.get("status") == "ok" and "event" not in reply


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
        try:
            await self._serve(session)
        finally:
            self.open -= 1
            session.close_code = ws.close_code or 1000
            for queue in session.replies.values():
                queue.put_nowait({"status": "error", "event": "closed", "error": "socket closed"})
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
        session.register = message
        await ws.send_json({"v": 1, "event": "registered", "status": "ok",
                            "request_id": message["request_id"],
                            "session_id": f"coderai_{uuid.uuid4().hex}"})  # fmt: skip
        asyncio.get_running_loop().create_task(self._list_models(session))
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                break
            message = json.loads(msg.data)
            if message.get("op") == "heartbeat":
                session.heartbeats.append(message)
                await ws.send_json({"v": 1, "request_id": message["request_id"], "status": "ok",
                                    "event": "heartbeat", "payload": {"ts": 0}})  # fmt: skip
            elif message.get("request_id") in session.replies:
                session.replies[message["request_id"]].put_nowait(message)

    async def _list_models(self, session: Session) -> None:
        replies = await self._request(session, "models.list", {})
        session.models = replies[-1]

    async def _call(self, op: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
        return await self._request(self.sessions[-1], op, payload)

    async def _request(
        self, session: Session, op: str, payload: dict[str, Any]
    ) -> list[dict[str, Any]]:
        rid = f"broker_{uuid.uuid4().hex}"
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        session.replies[rid] = queue
        await session.ws.send_json({"v": 1, "op": op, "request_id": rid, "provider_id": PROVIDER,
                                    "client_id": CLIENT, "payload": payload})  # fmt: skip
        replies = []
        while True:
            reply = await queue.get()
            replies.append(reply)
            if terminal(reply):
                del session.replies[rid]
                return replies
