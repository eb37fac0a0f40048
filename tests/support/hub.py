"""A small HTTP server speaking the part of the Hugging Face hub's file API that the client
library uses to fetch a model: the repo listing (`/api/models/ORG/NAME[/revision/REV]`,
with files' sizes and checksums) and the files (`HEAD`/`GET /ORG/NAME/resolve/REV/PATH`,
with the hub's headers: `X-Repo-Commit`, `ETag`, `X-Linked-Etag`/`X-Linked-Size` for LFS
files, Range requests answered 206). Errors carry the hub's `X-Error-Code`.

It is the one stand-in the tests use: the hub cannot be reached from these machines. Faults
are asked for per file: a connection cut halfway through the first GET, or bytes that differ
from the listed checksum."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LFS_SUFFIXES = (".gguf", ".safetensors", ".bin")


@dataclass
class HubRepo:
    files: dict[str, bytes]
    commit: str = "c0ffee" * 6 + "c0ff"
    #: a token that may fetch it; None: anyone may
    gated_token: str | None = None
    #: sizes listed instead of the real ones (a file too big for the disk)
    listed_sizes: dict[str, int] = field(default_factory=dict)

    def is_lfs(self, name: str) -> bool:
        return name.endswith(LFS_SUFFIXES)

    def etag(self, name: str) -> str:
        data = self.files[name]
        if self.is_lfs(name):
            return hashlib.sha256(data).hexdigest()
        return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()

    def sibling(self, name: str) -> dict[str, Any]:
        data = self.files[name]
        size = self.listed_sizes.get(name, len(data))
        git = hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()
        entry: dict[str, Any] = {"rfilename": name, "size": size, "blobId": git}
        if self.is_lfs(name):
            entry["lfs"] = {"size": size, "sha256": self.etag(name), "pointerSize": 134}
        return entry


@dataclass
class Hub:
    repos: dict[str, HubRepo] = field(default_factory=dict)
    #: (method, path, Range header) of every request, in order
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    #: files whose first GET is cut after half their bytes
    cut_once: set[str] = field(default_factory=set)
    #: files served with a byte changed (their listed checksum stays the true one)
    corrupt: set[str] = field(default_factory=set)
    #: files whose GET sends half its bytes, then waits for the event before the rest
    held: dict[str, threading.Event] = field(default_factory=dict)
    url: str = ""


def _handler(hub: Hub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return None

        def _send(self, status: int, headers: dict[str, str], body: bytes = b"") -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _error(self, status: int, code: str, message: str, commit: str | None = None) -> None:
            headers = {"X-Error-Code": code, "X-Error-Message": message,
                       "Content-Type": "application/json"}  # fmt: skip
            if commit:
                headers["X-Repo-Commit"] = commit
            self._send(status, headers, json.dumps({"error": message}).encode())

        def do_GET(self) -> None:
            hub.requests.append((self.command, self.path, self.headers.get("Range")))
            path = self.path.split("?", 1)[0]
            if path.startswith("/api/models/"):
                self._info(path.removeprefix("/api/models/"))
            elif "/resolve/" in path:
                self._file(path)
            else:
                self._error(404, "EntryNotFound", "not part of this hub")

        do_HEAD = do_GET

        def _info(self, rest: str) -> None:
            parts = rest.split("/")
            repo = hub.repos.get("/".join(parts[:2]))
            if repo is None:
                self._error(404, "RepoNotFound", "Repository not found")
                return
            body = {"id": "/".join(parts[:2]), "modelId": "/".join(parts[:2]),
                    "sha": repo.commit, "private": False,
                    "gated": "manual" if repo.gated_token else False,
                    "siblings": [repo.sibling(n) for n in sorted(repo.files)]}  # fmt: skip
            self._send(200, {"Content-Type": "application/json"}, json.dumps(body).encode())

        def _file(self, path: str) -> None:
            repo_path, _, rest = path.lstrip("/").partition("/resolve/")
            revision, _, name = rest.partition("/")
            repo = hub.repos.get(repo_path)
            if repo is None:
                self._error(404, "RepoNotFound", "Repository not found")
                return
            allowed = repo.gated_token is None or (
                self.headers.get("Authorization") == f"Bearer {repo.gated_token}"
            )
            if not allowed:
                self._error(401, "GatedRepo", "Access to this model is restricted")
                return
            if revision not in (repo.commit, "main") or name not in repo.files:
                self._error(404, "EntryNotFound", "Entry not found", repo.commit)
                return
            data = repo.files[name]
            if name in hub.corrupt:
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{repo.etag(name)}"',
                       "Accept-Ranges": "bytes",
                       "Content-Type": "application/octet-stream"}  # fmt: skip
            if repo.is_lfs(name):
                headers["X-Linked-Etag"] = f'"{repo.etag(name)}"'
                headers["X-Linked-Size"] = str(repo.listed_sizes.get(name, len(data)))
            asked = self.headers.get("Range")
            if asked and self.command == "GET":
                start = int(asked.removeprefix("bytes=").split("-")[0])
                headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                self._send(206, headers, data[start:])
                return
            if self.command == "GET" and name in hub.cut_once:
                hub.cut_once.discard(name)
                self._first_half(headers, data)
                self.close_connection = True
                self.connection.shutdown(2)  # the peer sees the body end short
                return
            if self.command == "GET" and name in hub.held:
                self._first_half(headers, data)
                hub.held[name].wait(60)
                self.wfile.write(data[len(data) // 2 :])
                return
            self._send(200, headers, data)

        def _first_half(self, headers: dict[str, str], data: bytes) -> None:
            """The answer's head, for all of `data`, and half its bytes."""
            self.send_response(200)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()

    return Handler


@contextmanager
def serve(hub: Hub) -> Iterator[Hub]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    server.daemon_threads = True
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
