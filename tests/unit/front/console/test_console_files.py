"""The console's files: served by name from the package, with the types browsers require,
and nothing else: no path a client sends reaches the file system."""

from __future__ import annotations

import asyncio
import re

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from coderai.front.console.site import WEB, Console
from coderai.front.http import error_boundary


def fetch(*paths: str) -> list[tuple[int, dict[str, str], bytes]]:
    """Each path's status, headers and body, from an app serving the console alone."""

    async def run() -> list[tuple[int, dict[str, str], bytes]]:
        app = web.Application(middlewares=[error_boundary(lambda request, response: None)])
        Console().add_to(app)
        async with TestClient(TestServer(app)) as client:
            out = []
            for path in paths:
                response = await client.get(path)
                out.append((response.status, dict(response.headers), await response.read()))
            return out

    return asyncio.run(run())


def test_the_page_is_served_at_the_root_and_runs_only_its_own_scripts() -> None:
    ((status, headers, body),) = fetch("/")
    assert status == 200
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
    assert headers["Cache-Control"] == "no-cache"
    assert b'<script type="module" src="/ui/app.js">' in body


def test_every_asset_the_page_and_its_modules_name_is_served_with_its_type() -> None:
    named = set(re.findall(r'(?:src|href)="/ui/([\w.-]+)"', (WEB / "index.html").read_text()))
    for script in WEB.glob("*.js"):
        named |= set(re.findall(r"from '\./([\w.-]+)'", script.read_text()))
    assert {"app.js", "app.css", "dom.js", "api.js"} <= named
    types = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
    for name, (status, headers, _) in zip(named, fetch(*(f"/ui/{n}" for n in named)), strict=True):
        assert status == 200, name
        assert headers["Content-Type"] == types[name[name.rindex(".") :]], name
        assert headers["X-Content-Type-Options"] == "nosniff"


def test_names_outside_the_console_folder_are_not_found() -> None:
    answers = fetch(
        "/ui/console.py",
        "/ui/..%2Fconsole.py",
        "/ui/%2E%2E%2Fapp.py",
        "/ui/../app.py",
        "/ui/missing.js",
        "/ui/",
    )
    assert [status for status, _, _ in answers] == [404] * len(answers)
    assert all(b"def " not in body for _, _, body in answers)
