"""The operator's console: the static files in web/, served at `/` (the page) and
`/ui/<file>` (its scripts and style). The console is plain ES modules with no build step;
everything it shows comes from /admin/api, which is where the credentials are checked.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from coderai.errors import NotFound

WEB = Path(__file__).with_name("web")
TYPES = {
    ".html": "text/html; charset=utf-8",
    # a JavaScript type is required: browsers refuse modules served as anything else
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
HEADERS = {
    # revalidated on every load: a new version of the server is seen without a hard reload
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
#: the page runs only its own scripts and talks only to its own origin; no site may frame
#: it (its buttons restart engines)
PAGE_POLICY = (
    "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)


class Console:
    def __init__(self, folder: Path = WEB) -> None:
        # listed once: a request names one of these or gets a 404, so no path a client
        # sends ever reaches the file system
        self.files = {p.name: p for p in folder.iterdir() if p.is_file() and p.suffix in TYPES}

    def add_to(self, app: web.Application) -> None:
        app.router.add_get("/", self.page)
        app.router.add_get("/ui/{file}", self.asset)

    async def page(self, request: web.Request) -> web.FileResponse:
        return self._file("index.html", {"Content-Security-Policy": PAGE_POLICY})

    async def asset(self, request: web.Request) -> web.FileResponse:
        return self._file(request.match_info["file"], {})

    def _file(self, name: str, extra: dict[str, str]) -> web.FileResponse:
        path = self.files.get(name)
        if path is None:
            raise NotFound(f"the console has no file {name!r}")
        headers = {**HEADERS, "Content-Type": TYPES[path.suffix], **extra}
        return web.FileResponse(path, headers=headers)
