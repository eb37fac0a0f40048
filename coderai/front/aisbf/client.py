"""The AISBF broker uplink: the front connects out to a broker over a WebSocket (so a node
behind NAT can be offered), registers with a summary of its hardware, sends heartbeats,
and answers the broker's requests (chat.py) until the socket closes; then it
connects again after a wait that doubles up to `reconnect_max_seconds`. It registers again
when what a registration says changes (engines join after the first one).

One task owns the socket and runs one session at a time, so the old socket is always
closed before a new one opens: the broker is confused by two sockets with one client id.
At shutdown that task leaves: the requests' last frames, a round trip that shows the broker
has read them, then the closing handshake (see `_leave`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from coderai.common.logthrottle import ThrottledLog
from coderai.config import BrokerConfig
from coderai.front.aisbf import wire
from coderai.front.aisbf.chat import BrokerAnswers
from coderai.front.dispatch.engine_view import EngineView

log = logging.getLogger("coderai.front.aisbf")

#: the broker closes a socket that has not registered within 30 s; we give up sooner
REGISTER_TIMEOUT = 20.0
#: a session that lasted this long was a success: the next wait starts small again
STABLE_SECONDS = 60.0
FIRST_WAIT = 1.0
#: a request cut by this node's leaving still tries to tell the broker, this long; and
#: each later step of leaving (the round trip, the closing handshake) gets as long
LAST_WORD_SECONDS = 1.0
#: leaving takes its steps' time at most; past this the socket is dropped
LEAVE_SECONDS = 5 * LAST_WORD_SECONDS
#: how often the fleet is looked at for a change to register (more often if the node beats
#: more often)
FLEET_LOOK_SECONDS = 2.0


def without_secrets(text: str) -> str:
    """Text with the user part and the query of any URL in it removed: aiohttp's
    handshake errors quote the URL they asked for."""

    def bare(match: re.Match[str]) -> str:
        url = urlsplit(match.group(0))
        return f"{url.scheme}://{url.hostname or ''}{f':{url.port}' if url.port else ''}{url.path}"

    return re.sub(r"\b(?:wss?|https?)://[^\s'\"]+", bare, text)


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
        self._leaving = asyncio.Event()
        #: this node's messages whose answer it waits for, by request id
        self._awaited: dict[str, asyncio.Future[None]] = {}
        self._refusals = ThrottledLog(log)
        #: why this node cut the current socket, if it did
        self._cut: str | None = None
        self._registered_at: float | None = None
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
        """Leave the broker, telling it what it should hear first (see `_leave`)."""
        if self._task is None:
            return
        self._leaving.set()
        if self._ws is None:  # between sessions: nothing to tell
            self._task.cancel()
        await asyncio.wait({self._task}, timeout=LEAVE_SECONDS)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self.state = "stopped"

    def status(self) -> dict[str, Any]:
        now = time.monotonic()
        return {
            "enabled": True,
            "url": without_secrets(self.config.url or ""),
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
            while not self._leaving.is_set():
                self.state = "connecting"
                self._registered_at = None
                try:
                    await self._session(http)
                except asyncio.CancelledError:
                    raise
                except (aiohttp.ClientError, OSError, TimeoutError, wire.BadFrame) as exc:
                    self.last_error = without_secrets(f"{type(exc).__name__}: {exc}")
                except Exception as exc:  # a defect here must not end the uplink for good
                    log.exception("the broker session failed")
                    self.last_error = without_secrets(f"{type(exc).__name__}: {exc}")
                finally:
                    self.connected_since = self.session_id = None
                if self._leaving.is_set():
                    return
                registered = self._registered_at
                if registered is not None and time.monotonic() - registered > STABLE_SECONDS:
                    wait = FIRST_WAIT
                self.state = "backoff"
                self.retry_at = time.monotonic() + wait
                self._refusals.warning("broker %s: %s; connecting again in %.0f s",
                                       self.status()["url"], self.last_error, wait)  # fmt: skip
                await asyncio.sleep(wait)
                self.retry_at = None
                wait = min(self.config.reconnect_max_seconds, wait * 2)

    async def _session(self, http: aiohttp.ClientSession) -> None:
        c = self.config
        assert c.url is not None
        # who this node is, in the query; the token in a header only, so that no URL
        # (which errors and proxies' logs quote) ever holds it
        identity = {"provider_id": c.provider_id, "client_id": c.client_id,
                    "username": c.username}  # fmt: skip
        params = {k: v for k, v in identity.items() if v}
        headers = {f"x-coderai-{k.replace('_', '-')}": v for k, v in params.items()}
        headers["x-coderai-registration-token"] = c.registration_token or ""
        ws = await http.ws_connect(
            c.url,
            params=params,
            headers=headers,
            max_msg_size=wire.MAX_FRAME_BYTES,
            # WebSocket pings find a dead broker (or a dead path to it) between requests
            heartbeat=c.ping_seconds,
            timeout=aiohttp.ClientWSTimeout(ws_close=LAST_WORD_SECONDS),
        )
        self._ws = ws
        self._cut = None
        self._registered.clear()
        self.connects += 1
        self.connected_since = time.monotonic()
        self.state = "registering"
        loop = asyncio.get_running_loop()
        registration = self._register(wire.new_request_id("reg"))
        told = wire.standing(registration["payload"])
        helpers = [loop.create_task(self._heartbeats(ws)),
                   loop.create_task(self._follow_fleet(ws, told))]  # fmt: skip
        # the socket is read by a task of its own, so that leaving never cancels a read: a
        # cancelled read makes aiohttp drop the socket on close, without the handshake
        reader = loop.create_task(self._read(ws))
        leaving = loop.create_task(self._leaving.wait())
        try:
            await self._send(ws, registration)
            await asyncio.wait({reader, leaving}, return_when=asyncio.FIRST_COMPLETED)
            if leaving.done():
                await self._leave(ws, helpers)
            await reader  # how the socket ended: a registration never answered raises
        finally:
            requests = list(self._requests.values())
            for task in [leaving, *helpers, reader, *requests]:
                task.cancel()  # the requests' jobs are cancelled; each says its last word
            await asyncio.gather(leaving, *helpers, reader, *requests, return_exceptions=True)
            self._ws = None
            await ws.close()

    async def _leave(
        self, ws: aiohttp.ClientWebSocketResponse, helpers: list[asyncio.Task[None]]
    ) -> None:
        """End the session so that the broker keeps what it was told last. AISBF reads its
        socket in order but handles replies on another task, which the socket's closing
        cancels: frames followed within a millisecond by the close are lost. So the
        requests end first (at shutdown their jobs have just ended, their last frames are
        on the way; the rest are cut and say their last word), then a heartbeat's answer
        shows that the broker has read them all and gives it that round trip to handle
        them, and only then does the socket close, with the closing handshake."""
        for task in helpers:
            task.cancel()
        requests = list(self._requests.values())
        if requests:
            _, running = await asyncio.wait(requests, timeout=LAST_WORD_SECONDS)
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
        with contextlib.suppress(ConnectionError, TimeoutError):
            async with asyncio.timeout(LAST_WORD_SECONDS):
                await self._round_trip(ws)
        self._cut = "this node left"
        await ws.close()

    async def _round_trip(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        """A heartbeat, answered."""
        request_id = wire.new_request_id("hb")
        answered = asyncio.get_running_loop().create_future()
        self._awaited[request_id] = answered
        try:
            await self._send(ws, wire.heartbeat(request_id, self._engines(), len(self._requests)))
            await answered
        finally:
            del self._awaited[request_id]

    def _register(self, request_id: str) -> dict[str, Any]:
        token = self.config.registration_token or ""
        return wire.register(
            request_id, self.config.endpoint, token, self._engines(), self._models()
        )

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
            else:  # an error (a frame over 16 MiB, a ping unanswered), closing or closed
                self.last_error = self._why_closed(ws, msg)
                return

    def _why_closed(self, ws: aiohttp.ClientWebSocketResponse, msg: aiohttp.WSMessage) -> str:
        if self._cut is not None:  # this node cut it (the broker took nothing)
            return self._cut
        error = msg.data if msg.type == aiohttp.WSMsgType.ERROR else ws.exception()
        if isinstance(error, aiohttp.WebSocketError) and error.code == 1009:
            return f"the broker's frame was refused: {error}"
        if error is not None:
            return without_secrets(f"the socket failed: {type(error).__name__}: {error}")
        return f"the broker closed the socket ({ws.close_code})"

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
            # an answer on that id would end the request that runs under it
            self._refusals.warning("the broker sent request %s twice; ignored", request.request_id)
            return
        task = asyncio.get_running_loop().create_task(self._answer(ws, request))
        self._requests[request.request_id] = task
        task.add_done_callback(lambda t: self._ended(request.request_id, t))

    def _on_answer(self, message: dict[str, Any]) -> None:
        """The broker's answer to our register or heartbeat."""
        awaited = self._awaited.get(str(message.get("request_id")))
        if awaited is not None and not awaited.done():
            awaited.set_result(None)
        if message.get("event") == "registered" and message.get("status") == "ok":
            self.session_id = str(message.get("session_id") or "") or None
            self.state = "registered"
            if not self._registered.is_set():  # the session began here, not at a re-register
                self._registered_at = time.monotonic()
                self._registered.set()
                log.info("registered with the broker %s (session %s)", self.config.url,
                         self.session_id)  # fmt: skip
        elif message.get("status") == "error":
            self.last_error = f"the broker answered: {message.get('error')}"
            log.warning("the broker answered an error: %s", message.get("error"))

    def _ended(self, request_id: str, task: asyncio.Task[None]) -> None:
        if self._requests.get(request_id) is task:
            del self._requests[request_id]

    async def _answer(
        self, ws: aiohttp.ClientWebSocketResponse, request: wire.BrokerRequest
    ) -> None:
        """One request, answered however it ends: the broker keeps a client waiting for
        hours on a request whose answer does not end in a way it reads as an end."""
        rid = request.request_id

        async def send(message: dict[str, Any]) -> None:
            await self._send(ws, message)

        async def fail(message: str, code: str, error_type: str = "server_error") -> None:
            self.errors += 1
            reply = wire.error(rid, message, code, error_type=error_type)
            for frame in wire.ending(reply, wire.streams(request.payload)):
                await send(frame)

        try:
            if request.op == "models.list":
                await send(wire.ok(rid, self.answers.models()))
            elif request.op == "chat.completions":
                if await self.answers.chat(rid, request.payload, send):
                    self.errors += 1
            elif request.op == "capabilities":
                await send(wire.ok(rid, wire.capabilities(self._engines(), self._models())))
            elif request.op == "register":
                payload = self._register(rid)["payload"]
                await send(wire.ok(rid, {k: v for k, v in payload.items()
                                         if k != "registration_token"}))  # fmt: skip
            else:  # `proxy` included: this node answers the operations above only
                await fail(f"this node does not answer {request.op!r}", "unsupported_operation",
                           "invalid_request_error")  # fmt: skip
            self.answered += 1
        except ConnectionError:
            pass  # the socket went; the session ends and connects again
        except asyncio.CancelledError:
            # this node leaves (or drops the socket): a last word, if the socket still
            # takes one, so the broker's client is not left waiting
            with contextlib.suppress(ConnectionError, TimeoutError):
                async with asyncio.timeout(LAST_WORD_SECONDS):
                    await fail("the node is disconnecting", "node_disconnecting")
            raise
        except Exception:
            log.exception("answering the broker's %s %s failed", request.op, rid)
            with contextlib.suppress(ConnectionError):
                await fail("the node failed to answer", "internal_error")

    async def _heartbeats(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        await self._registered.wait()
        while True:
            try:
                beat = wire.heartbeat(
                    wire.new_request_id("hb"), self._engines(), len(self._requests)
                )
                await self._send(ws, beat)
            except ConnectionError:
                pass  # the session ends and connects again
            except Exception:  # one bad beat must not end the beats
                log.exception("a heartbeat to the broker failed")
            await asyncio.sleep(self.config.heartbeat_seconds)

    async def _follow_fleet(
        self, ws: aiohttp.ClientWebSocketResponse, told: dict[str, Any]
    ) -> None:
        """Register again when what a registration says changes: the broker keeps the last
        registration's engines and slots (heartbeats change neither), and this node
        registers before its engines have joined."""
        await self._registered.wait()
        before = told
        every = min(self.config.heartbeat_seconds, FLEET_LOOK_SECONDS)
        while True:
            await asyncio.sleep(every)
            try:
                registration = self._register(wire.new_request_id("reg"))
                now = wire.standing(registration["payload"])
                if wire.register_again(told, now, before):
                    caps = now["capabilities"]
                    log.info("registering with the broker again: %d engines, %d slots, %d models",
                             caps["engines"], caps["slots"], len(caps["models"]))  # fmt: skip
                    await self._send(ws, registration)
                    told = now
                before = now
            except ConnectionError:
                return  # the session ends and connects again
            except Exception:  # one bad look must not end the looking
                log.exception("registering with the broker again failed")

    async def _send(self, ws: aiohttp.ClientWebSocketResponse, message: dict[str, Any]) -> None:
        """Send one frame; frames go out whole and one at a time. A broker that takes
        nothing for the stall timeout is dropped (ConnectionError here and in every
        request, whose jobs are then cancelled)."""
        text = wire.encode(message)
        # at most 4 bytes a character: only a long text can be over the limit
        if len(text) > wire.MAX_FRAME_BYTES // 4 and len(text.encode()) > wire.MAX_FRAME_BYTES:
            rid = str(message.get("request_id", ""))
            self.errors += 1
            text = wire.encode(wire.error(rid, "the answer exceeds the broker's 16 MiB frame limit",
                                          "frame_too_large"))  # fmt: skip
        async with self._send_lock:
            if ws.closed:
                raise ConnectionResetError("the broker socket is closed")
            try:
                async with asyncio.timeout(self._stall_timeout):
                    await ws.send_str(text)
            except TimeoutError:
                self._cut = f"the broker took nothing for {self._stall_timeout:.0f} s"
                await ws.close()
                raise ConnectionResetError(self._cut) from None

    def _models(self) -> list[str]:
        return [e.id for e in self.answers.serving.directory.entries()]
