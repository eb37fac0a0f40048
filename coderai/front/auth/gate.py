"""Who may call what: the admin API answers to the admin key or a console session (with
its CSRF token on every change); the API routes answer to API keys when they are
required, and every API request, keyed or not, is counted in Activity and usage.

Credentials are never logged: a refused key is named by nothing but the refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from coderai.errors import CoderaiError, Forbidden, InvalidApiKey, Unauthorized
from coderai.front.auth import budgets
from coderai.front.auth.activity import STREAMING, Activity, Ticket
from coderai.front.auth.limits import KeyLimits
from coderai.front.auth.state_store import StateStore
from coderai.front.auth.usage import UsageLedger
from coderai.front.dispatch.jobs import FrontJob
from coderai.front.http import ADMIN_PREFIX
from coderai.state import api_keys
from coderai.state.api_keys import ApiKey
from coderai.state.database import Session

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: admin routes that answer without credentials: logging in, and the API's description
ADMIN_OPEN = frozenset({("POST", ADMIN_PREFIX + "login"), ("GET", ADMIN_PREFIX + "openapi.json")})
#: the routes that serve models, gated by API keys
API_PREFIXES = ("/v1/", "/tokenize", "/detokenize")
SESSION_COOKIE = "coderai_session"
CSRF_HEADER = "X-CSRF-Token"
#: methods that change state, which a cookie alone never authorizes
CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: how long a key read from the database is trusted before it is read again: a key
#: revoked in the console stops at once; one revoked by `coderai keys revoke` (another
#: process) within this time
KEY_CACHE_SECONDS = 5.0
#: how long a request's cancelled jobs may take to report the tokens they used
SETTLE_SECONDS = 30.0
#: how often a console's long request (a live stream) checks that its session still is
SESSION_RECHECK_SECONDS = 5.0
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def requires_api_key(setting: bool | None, host: str) -> bool:
    """auth.require_api_key, or by default: required unless only this machine can call."""
    return setting if setting is not None else host not in LOOPBACK


def bearer_token(header: str) -> str | None:
    """The credentials of an `Authorization: Bearer <token>` header. The scheme is
    case-insensitive (RFC 7235 section 2.1)."""
    scheme, _, token = header.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def token_hash(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


def same(given: str, expected: str) -> bool:
    """Constant-time comparison; bytes that are not UTF-8 (aiohttp keeps them as
    surrogates) compare unequal, never crash."""
    encode = "utf-8", "surrogateescape"
    return hmac.compare_digest(given.encode(*encode), expected.encode(*encode))


@dataclass(frozen=True)
class Admin:
    """An authorized admin request: `user` is None for the admin key."""

    user: str | None
    session: Session | None = None


class Auth:
    def __init__(
        self,
        admin_key: str,
        store: StateStore,
        activity: Activity,
        usage: UsageLedger,
        require_key: bool,
        refusals: Mapping[str, Callable[[CoderaiError], web.Response]] | None = None,
    ) -> None:
        self.admin_key = admin_key
        #: by path prefix, how an API whose clients read another error shape than
        #: OpenAI's answers a refusal (Anthropic's Messages: its routes give it)
        self.refusals = dict(refusals or {})
        self.store = store
        self.activity = activity
        self.usage = usage
        self.require_key = require_key
        self.limits = KeyLimits()
        self._keys: dict[str, tuple[ApiKey | None, float]] = {}
        #: requests whose jobs are still ending, to be counted when they have
        self._settling: set[asyncio.Task[None]] = set()

    def forget_key(self, key_id: str) -> None:
        """A key changed (revoked): read it again before its next use."""
        self._keys.pop(key_id, None)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        if path.startswith(ADMIN_PREFIX):
            if (request.method, path) in ADMIN_OPEN:
                return await handler(request)
            admin = request["admin"] = await self.admin(request)
            if admin.session is None:
                return await handler(request)
            return await self._while_session_lasts(request, handler, admin.session)
        if path.startswith(API_PREFIXES):
            try:
                return await self._gate(request, handler)
            except CoderaiError as exc:
                for prefix, refuse in self.refusals.items():
                    if path.startswith(prefix):  # its clients read its shape
                        return refuse(exc)
                raise
        return await handler(request)

    # the admin API

    async def admin(self, request: web.Request) -> Admin:
        token = bearer_token(request.headers.get("Authorization", ""))
        if token is not None and same(token, self.admin_key):
            return Admin(None)
        session = await self.session_of(request)
        if session is None:
            raise Unauthorized("log in, or send the admin key as 'Authorization: Bearer <key>'")
        if request.method in CHANGING:
            sent = request.headers.get(CSRF_HEADER, "")
            if not same(sent, session.csrf):
                raise Forbidden(f"this request needs the session's {CSRF_HEADER} header")
        return Admin(session.username, session)

    async def _while_session_lasts(
        self, request: web.Request, handler: Handler, session: Session
    ) -> web.StreamResponse:
        """Run a console request while its session lasts: a live stream (events, logs)
        must not outlive a logout, a new password or the session's expiry. A stream
        whose session is found gone is cancelled, which closes its connection; any other
        request is left to finish and answer (it was authorized when it began)."""
        serving = asyncio.current_task()
        assert serving is not None

        async def watch() -> None:
            while True:
                left = session.expires_at - time.time()
                await asyncio.sleep(max(0.0, min(SESSION_RECHECK_SECONDS, left)))
                if await self.session_of(request) is None:
                    if request.get(STREAMING):
                        serving.cancel()
                    return

        watcher = asyncio.get_running_loop().create_task(watch())
        try:
            return await handler(request)
        finally:
            watcher.cancel()

    async def session_of(self, request: web.Request) -> Session | None:
        cookie = request.cookies.get(SESSION_COOKIE)
        if not cookie:
            return None
        hashed = token_hash(cookie)
        session = await self.store.run(lambda db: db.session(hashed))
        if session is None or session.expires_at <= time.time():
            return None
        return session

    # the API routes

    async def _gate(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        key, caller = await self._caller(request)
        if key is not None:
            if request.method == "POST":  # reading (the model list) spends no tokens
                now = time.time()
                today, this_month = self.usage.spending.spent(key.id, now)
                refused = budgets.refusal(key, today, this_month, now)
                if refused is not None:
                    raise refused
            self.limits.admit(key, time.monotonic())
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else request.path
        ticket = self.activity.open(route, key, caller, shown=request.method == "POST")
        status, client_left = 500, False
        try:
            response = await handler(request)
            status = response.status
            ticket.stream = ticket.stream or response.content_type == "text/event-stream"
            return response
        except CoderaiError as exc:
            status = exc.status
            raise
        except web.HTTPException as exc:
            status = exc.status
            raise
        except asyncio.CancelledError:
            # a stream that began has sent its 200; a request that had not, nothing
            # (499: nginx's "client closed request")
            client_left, status = True, 200 if ticket.stream else 499
            raise
        finally:
            self.activity.close(ticket, status, client_left)
            if key is not None:
                self.limits.release(key.id, time.monotonic())
            unended = [j for j in ticket.jobs if j.outcome is None]
            if unended:
                # jobs cancelled because their client left end with the tokens they used
                # a step later: counted then, or a client could dodge its token limit
                settling = asyncio.get_running_loop().create_task(self._settle(ticket, unended))
                self._settling.add(settling)
                settling.add_done_callback(self._settling.discard)
            else:
                self._count(ticket)

    async def settled(self, timeout: float) -> None:
        """Wait (at most `timeout` s) for the counts of requests whose jobs are still
        ending: at shutdown, before usage is written for the last time."""
        if self._settling:
            await asyncio.wait(set(self._settling), timeout=timeout)

    async def _settle(self, ticket: Ticket, jobs: list[FrontJob]) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(SETTLE_SECONDS):
                for job in jobs:
                    while job.outcome is None:
                        await job.wait()
        self._count(ticket)

    def _count(self, ticket: Ticket) -> None:
        """Charge an ended request's tokens to its key's limit and to usage."""
        if ticket.key is not None:
            self.limits.spend(ticket.key.id, sum(ticket.tokens()), time.monotonic())
        self.usage.record(ticket)

    async def _caller(self, request: web.Request) -> tuple[ApiKey | None, str | None]:
        """The request's API key, or who else it is (the admin key, a console session);
        (None, None) for an anonymous request where keys are not required."""
        headers = request.headers
        token = bearer_token(headers.get("Authorization", "")) or headers.get("x-api-key")
        if token:
            parts = api_keys.split(token)
            if parts is not None:
                return await self._key(*parts), None
            if same(token, self.admin_key):
                return None, "admin"
        elif request.cookies.get(SESSION_COOKIE):
            # the Playground: a console session, with its CSRF token (SameSite=Strict
            # already keeps other sites' requests from carrying the cookie)
            session = await self.session_of(request)
            if session is not None and same(headers.get(CSRF_HEADER, ""), session.csrf):
                return None, f"console:{session.username}"
        if self.require_key:
            raise InvalidApiKey(
                "this server requires an API key (cai-…, from `coderai keys create` or the "
                "console); what was sent is not one"
                if token
                else "this server requires an API key: send it as 'Authorization: Bearer <key>'"
            )
        # keys are not required: a client's placeholder ("sk-none") is no key at all
        return None, None

    async def _key(self, key_id: str, secret: str) -> ApiKey:
        now = time.monotonic()
        cached = self._keys.get(key_id)
        if cached is None or now - cached[1] > KEY_CACHE_SECONDS:
            found = await self.store.run(lambda db: db.key(key_id))
            cached = self._keys[key_id] = (found, now)
            if len(self._keys) > 10_000:  # ids that are not keys must not fill memory
                self._keys = {k: v for k, v in self._keys.items() if v[0] is not None}
        key = cached[0]
        if key is None or not key.matches(secret) or not key.usable(time.time()):
            raise InvalidApiKey("the API key is not valid (unknown, revoked or expired)")
        return key


def session_cookie(response: web.StreamResponse, token: str, max_age: int, secure: bool) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        token,
        max_age=max_age,
        path="/",
        httponly=True,
        samesite="Strict",
        secure=secure,
    )


def admin_of(request: web.Request) -> Admin:
    admin: Any = request.get("admin")
    assert isinstance(admin, Admin), "the auth middleware runs before every admin route"
    return admin
