"""/admin/api: logging in and out, admin users, API keys and their usage."""

from __future__ import annotations

import asyncio
import functools
import math
import secrets
import time
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from coderai.config import AuthConfig
from coderai.errors import InvalidRequest, LoginLocked, NotFound, WrongPassword
from coderai.front.auth.gate import SESSION_COOKIE, Auth, admin_of, session_cookie, token_hash
from coderai.front.auth.login_guard import LoginGuard, LoginPolicy, address_key
from coderai.front.auth.usage import UsageLedger
from coderai.front.dispatch.catalogue import ModelDirectory
from coderai.front.http import ADMIN_PREFIX, read_body
from coderai.state import api_keys
from coderai.state.api_keys import ApiKey
from coderai.state.database import LastUser
from coderai.state.passwords import hash_password, verify_password

PREFIX = ADMIN_PREFIX
USERNAME = r"^[A-Za-z0-9_.@-]{1,64}$"


def _check(password: str, stored: str | None) -> bool:
    return verify_password(password, stored or _nobody())


@functools.cache
def _nobody() -> str:
    """A hash compared against when the user does not exist, so that an unknown name
    takes as long to refuse as a wrong password (no user enumeration by timing). Made at
    the first login, not at import: scrypt is 0.15 s of CPU every front start would pay."""
    return hash_password(secrets.token_hex(16))


class Strict(BaseModel):
    """Admin bodies: a field this API does not know is refused, never ignored."""

    model_config = ConfigDict(extra="forbid", strict=True)


class Login(Strict):
    username: str = Field(max_length=64)
    password: str = Field(max_length=1024)


class NewUser(Strict):
    username: str = Field(pattern=USERNAME)
    password: str = Field(min_length=8, max_length=1024)


class NewPassword(Strict):
    password: str = Field(min_length=8, max_length=1024)


class KeyLimitsBody(Strict):
    """A key's limits, budgets and weight; null (or left out, on create) lifts one."""

    rpm: int | None = Field(None, ge=1, le=api_keys.MOST)
    tpm: int | None = Field(None, ge=1, le=api_keys.MOST)
    max_concurrent: int | None = Field(None, ge=1, le=api_keys.MOST)
    tokens_per_day: int | None = Field(None, ge=1, le=api_keys.MOST)
    tokens_per_month: int | None = Field(None, ge=1, le=api_keys.MOST)
    #: its share of the queue against other keys' (fair share); null: the default, 1
    weight: float | None = Field(None, ge=0.01, le=100)

    def limits(self, only_sent: bool) -> dict[str, Any]:
        """The fields as a key's (api_keys.LIMITS); with only_sent, those the body named."""
        sent = self.model_dump(include=set(api_keys.LIMITS), exclude_unset=only_sent)
        if "weight" in sent and sent["weight"] is None:
            sent["weight"] = 1.0
        return sent


class NewKey(KeyLimitsBody):
    name: str = Field(min_length=1, max_length=100)
    models: list[str] | None = None
    expires_at: float | None = Field(None, gt=0)


class AccountRoutes:
    def __init__(
        self, auth: Auth, usage: UsageLedger, config: AuthConfig, directory: ModelDirectory
    ) -> None:
        self.auth = auth
        self.directory = directory
        self.store = auth.store
        self.usage = usage
        self.session_seconds = config.session_hours * 3600
        self.guard = LoginGuard(
            LoginPolicy(
                delay=config.login_delay_seconds,
                max_failures=config.login_max_failures,
                window=config.login_window_seconds,
                lock=config.login_lock_seconds,
            )
        )

    def add_to(self, app: web.Application) -> None:
        app.router.add_post(PREFIX + "login", self.login)
        app.router.add_post(PREFIX + "logout", self.logout)
        app.router.add_get(PREFIX + "session", self.session)
        app.router.add_get(PREFIX + "users", self.users)
        app.router.add_post(PREFIX + "users", self.add_user)
        app.router.add_patch(PREFIX + "users/{username}", self.set_password)
        app.router.add_delete(PREFIX + "users/{username}", self.delete_user)
        app.router.add_get(PREFIX + "keys", self.keys)
        app.router.add_post(PREFIX + "keys", self.create_key)
        app.router.add_patch(PREFIX + "keys/{id}", self.change_key)
        app.router.add_delete(PREFIX + "keys/{id}", self.revoke_key)
        app.router.add_get(PREFIX + "usage", self.usage_rows)

    # sessions

    async def login(self, request: web.Request) -> web.Response:
        # another site's form can post text/plain here, but not application/json
        # without a CORS preflight, which this server never answers: no login CSRF
        if request.content_type != "application/json":
            raise InvalidRequest("send the login as application/json")
        body = await read_body(request, Login)
        address = address_key(request.remote or "")
        locked = self.guard.locked_for(body.username, address, time.monotonic())
        if locked > 0:
            raise LoginLocked(
                "too many wrong passwords; try again later", retry_after=math.ceil(locked)
            )
        # counted as a failure before the check, so that guesses sent all at once are
        # counted as they arrive, and the lock stops the rest of a burst; the wait comes
        # before the check, so that no answer is known sooner
        await asyncio.sleep(self.guard.failed(body.username, address, time.monotonic()))
        stored = await self.store.run(lambda db: db.password_hash(body.username))
        # scrypt is ~0.15 s of CPU: off the loop, and off the state thread
        right = await asyncio.to_thread(_check, body.password, stored)
        if stored is None or not right:
            raise WrongPassword("wrong username or password")
        self.guard.succeeded(body.username, address)
        token, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(24)
        expires = time.time() + self.session_seconds
        hashed = token_hash(token)
        await self.store.run(lambda db: db.add_session(hashed, body.username, csrf, expires))
        response = web.json_response({"user": body.username, "csrf": csrf, "expires_at": expires})
        # rounded up: the browser keeps the cookie as long as the session lasts, not less
        max_age = math.ceil(self.session_seconds)
        session_cookie(response, token, max_age, secure=request.secure)
        return response

    async def logout(self, request: web.Request) -> web.Response:
        session = admin_of(request).session
        cookie = request.cookies.get(SESSION_COOKIE)
        if session is not None and cookie:
            hashed = token_hash(cookie)
            await self.store.run(lambda db: db.delete_session(hashed))
        response = web.Response(status=204)
        response.del_cookie(SESSION_COOKIE, path="/")
        return response

    async def session(self, request: web.Request) -> web.Response:
        admin = admin_of(request)
        if admin.session is None:
            return web.json_response({"user": None, "csrf": None, "expires_at": None})
        session = admin.session
        body = {"user": session.username, "csrf": session.csrf, "expires_at": session.expires_at}
        return web.json_response(body)

    # users

    async def users(self, request: web.Request) -> web.Response:
        return web.json_response({"users": await self.store.run(lambda db: db.users())})

    async def add_user(self, request: web.Request) -> web.Response:
        body = await read_body(request, NewUser)
        hashed = await asyncio.to_thread(hash_password, body.password)
        if not await self.store.run(lambda db: db.add_user(body.username, hashed)):
            raise InvalidRequest(f"a user named {body.username!r} exists", param="username")
        return web.json_response({"username": body.username}, status=201)

    async def set_password(self, request: web.Request) -> web.Response:
        name = request.match_info["username"]
        body = await read_body(request, NewPassword)
        hashed = await asyncio.to_thread(hash_password, body.password)
        if not await self.store.run(lambda db: db.set_password(name, hashed)):
            raise NotFound(f"no user named {name!r}")
        return web.json_response({"username": name})

    async def delete_user(self, request: web.Request) -> web.Response:
        name = request.match_info["username"]
        try:
            deleted = await self.store.run(lambda db: db.delete_user(name))
        except LastUser:
            raise InvalidRequest("the last admin user cannot be deleted") from None
        if not deleted:
            raise NotFound(f"no user named {name!r}")
        return web.Response(status=204)

    # API keys and usage

    async def keys(self, request: web.Request) -> web.Response:
        keys = await self.store.run(lambda db: db.api_keys())
        return web.json_response({"keys": [self._shown(k) for k in keys]})

    def _shown(self, key: ApiKey) -> dict[str, Any]:
        """A key as the console shows it: with the tokens it spent against its budgets."""
        today, this_month = self.usage.spending.spent(key.id, time.time())
        return {**key.public(), "tokens_today": today, "tokens_this_month": this_month}

    async def create_key(self, request: web.Request) -> web.Response:
        body = await read_body(request, NewKey)
        if body.expires_at is not None and body.expires_at <= time.time():
            raise InvalidRequest("expires_at is in the past", param="expires_at")
        for name in body.models or []:
            if self.directory.catalogue.resolve(name) is None:
                raise InvalidRequest(f"models: there is no model {name!r}", param="models")
        models = tuple(body.models) if body.models is not None else None
        record, token = api_keys.create(
            body.name, models, body.expires_at, **body.limits(only_sent=False)
        )
        await self.store.run(lambda db: db.add_key(record))
        return web.json_response({**self._shown(record), "key": token}, status=201)

    async def change_key(self, request: web.Request) -> web.Response:
        """Change a key's limits, budgets or weight: the fields sent, null lifting one.
        They apply to its next request."""
        key_id = request.match_info["id"]
        limits = (await read_body(request, KeyLimitsBody)).limits(only_sent=True)
        key = await self.store.run(lambda db: db.update_key(key_id, limits))
        if key is None:
            raise NotFound(f"no API key with id {key_id!r}")
        self.auth.forget_key(key_id)
        return web.json_response(self._shown(key))

    async def revoke_key(self, request: web.Request) -> web.Response:
        key_id = request.match_info["id"]
        if not await self.store.run(lambda db: db.revoke_key(key_id)):
            raise NotFound(f"no active API key with id {key_id!r}")
        self.auth.forget_key(key_id)
        return web.Response(status=204)

    async def usage_rows(self, request: web.Request) -> web.Response:
        raw = request.query.get("days", "30")
        if not raw.isdigit() or not 1 <= int(raw) <= 366:
            raise InvalidRequest("days must be a whole number from 1 to 366", param="days")
        rows = await self.usage.rows(int(raw))
        names = {k.id: k.name for k in await self.store.run(lambda db: db.api_keys())}
        out: list[dict[str, Any]] = [
            {
                "day": r.day,
                "key": names.get(r.key_id) if r.key_id else None,
                "key_id": r.key_id or None,
                "model": r.model,
                "requests": r.requests,
                "prompt_tokens": r.prompt_tokens,
                "completion_tokens": r.completion_tokens,
            }
            for r in rows
        ]
        return web.json_response({"usage": out})
