"""The AISBF broker uplink: the front connects out to a broker over a WebSocket (so a node
behind NAT can be offered), registers with a summary of its hardware, sends heartbeats,
and answers the broker's requests (broker_chat.py) until the socket closes; then it
connects again after a wait that doubles up to `reconnect_max_seconds`.

One task owns the socket and runs one session at a time, so the old socket is always
closed before a new one opens: the broker is confused by two sockets with one client id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from coderai.config import BrokerConfig
from coderai.front import broker_wire as wire
from coderai.front.broker_chat import BrokerAnswers
from coderai.front.engine_view import EngineView
from coderai.logthrottle import ThrottledLog

log = logging.getLogger("coderai.front.broker")

#: the broker closes a socket that has not registered within 30 s; we give up sooner
REGISTER_TIMEOUT = 20.0
#: a session that lasted this long was a success: the next wait starts small again
STABLE_SECONDS = 60.0
FIRST_WAIT = 1.0


class BrokerClient:
    def __init__(
        self,
        config: BrokerConfig,
        answers: BrokerAnswers,
        engines: Callable[[], list[EngineView]],
        stall_timeout: float,
    ) -> None:
        assert config.url is not None
        self.config = config
        self.answers = answers
        self._engines = engines
        #: a broker that takes no bytes for this long is dropped (its requests end)
        self._stall_timeout = stall_timeout
        self._task: asyncio.Task[None] | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._send_lock = asyncio.Lock()
        self._requests: dict[str, asyncio.Task[None]] = {}
        self._registered = asyncio.Event()
        self._refusals = ThrottledLog(log)
        # what the admin API shows
        self.state = "starting"
        self.session_id: str | None = None
        self.connected_since: float | None = None
        self.last_error: str | None = None
        self.connects = 0
        self.answered = 0
        self.errors = 0
        self.retry_at: float | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="broker")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def status(self) -> dict[str, Any]:
        now = time.monotonic()
        return {
            "enabled": True,
            "url": self.config.url,
            "provider_id": self.config.provider_id,
            "client_id": self.config.client_id,
            "state": self.state,
            "session_id": self.session_id,
            "connected_for_s": None
            if self.connected_since is None
            else round(now - self.connected_since, 1),
            "retry_in_s": None if self.retry_at is None else round(max(0, self.retry_at - now), 1),
            "connects": self.connects,
            "last_error": self.last_error,
            "requests": {
                "in_flight": len(self._requests),
                "answered": self.answered,
                "errors": self.errors,
            },
        }

    async def _run(self) -> None:
        wait = FIRST_WAIT
        async with aiohttp.ClientSession() as http:
            while True:
                began = time.monotonic()
                self.state = "connecting"
                try:
                    await self._session(http)
                except asyncio.CancelledError:
                    raise
                except (aiohttp.ClientError, OSError, TimeoutError, wire.BadFrame) as exc:
                    self.last_error = f"{type(exc).__name__}: {exc}"
                except Exception as exc:  # a defect here must not end the uplink for good
                    log.exception("the broker session failed")
                    self.last_error = f"{type(exc).__name__}: {exc}"
                finally:
                    self.connected_since = self.session_id = None
                if time.monotonic() - began > STABLE_SECONDS:
                    wait = FIRST_WAIT
                self.state = "backoff"
                self.retry_at = time.monotonic() + wait
                self._refusals.warning("broker %s: %s; connecting again in %.0f s",
                                       self.config.url, self.last_error, wait)  # fmt: skip
                await asyncio.sleep(wait)
                self.retry_at = None
                wait = min(self.config.reconnect_max_seconds, wait * 2)

    def _identity(self) -> dict[str, str]:
        c = self.config
        fields = {"provider_id": c.provider_id, "client_id": c.client_id,
                  "username": c.username, "registration_token": c.registration_token}  # fmt: skip
        return {k: v for k, v in fields.items() if v}

    async def _session(self, http: aiohttp.ClientSession) -> None:
        identity = self._identity()
        headers = {f"x-coderai-{k.replace('_', '-')}": v for k, v in identity.items()}
        assert self.config.url is not None
        ws = await http.ws_connect(
            self.config.url,
            params=identity,
            headers=headers,
            max_msg_size=wire.MAX_FRAME_BYTES,
            # a dead broker is found by TCP keep-alive pings at the WebSocket level
            heartbeat=self.config.heartbeat_seconds,
        )
        self._ws = ws
        self._registered.clear()
        self.connects += 1
        self.connected_since = time.monotonic()
        self.state = "registering"
        beats = asyncio.get_running_loop().create_task(self._heartbeats(ws))
        try:
            await self._send(ws, self._register(wire.new_request_id("reg")))
            await self._read(ws)
        finally:
            beats.cancel()
            requests = list(self._requests.values())
            for task in requests:
                task.cancel()  # their jobs are cancelled; the broker's clients see it end
            await asyncio.gather(beats, *requests, return_exceptions=True)
            self._ws = None
            await ws.close()

    def _register(self, request_id: str) -> dict[str, Any]:
        models = [e.id for e in self.answers.openai.directory.entries()]
        token = self.config.registration_token or ""
        return wire.register(request_id, self.config.endpoint, token, self._engines(), models)

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        deadline = asyncio.get_running_loop().time() + REGISTER_TIMEOUT
        while True:
            timeout = None
            if not self._registered.is_set():
                timeout = deadline - asyncio.get_running_loop().time()
                if timeout <= 0:
                    raise TimeoutError("the broker did not answer the registration")
            msg = await ws.receive(timeout=timeout)
            if msg.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                self._on_message(ws, msg.data)
            elif msg.type == aiohttp.WSMsgType.ERROR:  # e.g. a frame over 16 MiB (1009)
                self.last_error = f"the broker's frame was refused: {msg.data}"
                return
            else:  # closing or closed
                self.last_error = f"the broker closed the socket ({ws.close_code})"
                return

    def _on_message(self, ws: aiohttp.ClientWebSocketResponse, data: str | bytes) -> None:
        try:
            message = wire.read(data)
            request = wire.request_of(message)
        except wire.BadFrame as exc:
            self._refusals.warning("a broker frame was dropped: %s", exc)
            return
        if request is None:
            self._on_answer(message)
            return
        if request.request_id in self._requests:
            reply = wire.error(request.request_id, "this request id is already running",
                               "duplicate_request")  # fmt: skip
            self._spawn(request.request_id, self._send(ws, reply), track=False)
            return
        self._spawn(request.request_id, self._answer(ws, request), track=True)

    def _on_answer(self, message: dict[str, Any]) -> None:
        """The broker's answer to our register or heartbeat."""
        if message.get("event") == "registered" and message.get("status") == "ok":
            self.session_id = str(message.get("session_id") or "") or None
            self.state = "registered"
            self._registered.set()
            log.info("registered with the broker %s (session %s)", self.config.url,
                     self.session_id)  # fmt: skip
        elif message.get("status") == "error":
            self.last_error = f"the broker answered: {message.get('error')}"
            log.warning("the broker answered an error: %s", message.get("error"))

    def _spawn(self, request_id: str, work: Any, track: bool) -> None:
        task = asyncio.get_running_loop().create_task(work)
        if track:
            self._requests[request_id] = task
            task.add_done_callback(lambda t: self._ended(request_id, t))

    def _ended(self, request_id: str, task: asyncio.Task[None]) -> None:
        if self._requests.get(request_id) is task:
            del self._requests[request_id]

    async def _answer(
        self, ws: aiohttp.ClientWebSocketResponse, request: wire.BrokerRequest
    ) -> None:
        rid = request.request_id

        async def send(message: dict[str, Any]) -> None:
            if message.get("status") == "error":
                self.errors += 1
            await self._send(ws, message)

        try:
            if request.op == "models.list":
                await send(wire.ok(rid, self.answers.models()))
            elif request.op == "chat.completions":
                await self.answers.chat(rid, request.payload, send)
            elif request.op == "capabilities":
                models = [e.id for e in self.answers.openai.directory.entries()]
                await send(wire.ok(rid, wire.capabilities(self._engines(), models)))
            elif request.op == "register":
                await send(wire.ok(rid, self._register(rid)["payload"]))
            else:  # `proxy` included: this node answers the operations above only
                await send(wire.error(rid, f"this node does not answer {request.op!r}",
                                      "unsupported_operation"))  # fmt: skip
            self.answered += 1
        except ConnectionError:
            pass  # the socket went; the session ends and connects again

    async def _heartbeats(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        await self._registered.wait()
        while True:
            beat = wire.heartbeat(wire.new_request_id("hb"), self._engines(), len(self._requests))
            with contextlib.suppress(ConnectionError):
                await self._send(ws, beat)
            await asyncio.sleep(self.config.heartbeat_seconds)

    async def _send(self, ws: aiohttp.ClientWebSocketResponse, message: dict[str, Any]) -> None:
        """Send one frame; frames go out whole and one at a time. A broker that takes
        nothing for the stall timeout is dropped (ConnectionError here and in every
        request, whose jobs are then cancelled)."""
        text = wire.encode(message)
        if len(text.encode()) > wire.MAX_FRAME_BYTES:
            rid = str(message.get("request_id", ""))
            text = wire.encode(wire.error(rid, "the answer exceeds the broker's 16 MiB frame limit",
                                          "frame_too_large"))  # fmt: skip
        async with self._send_lock:
            if ws.closed:
                raise ConnectionResetError("the broker socket is closed")
            try:
                async with asyncio.timeout(self._stall_timeout):
                    await ws.send_str(text)
            except TimeoutError:
                self.last_error = f"the broker took nothing for {self._stall_timeout:.0f} s"
                await ws.close()
                raise ConnectionResetError(self.last_error) from None
