"""`coderai models list`: each model of the catalogue with its facts (catalogue/model_facts.py):
its context window, what it can do, and where it is loaded and for how long it has been
idle. Asked of the running server (its /v1/models, with the admin key), which knows what
its engines hold; with no server answering, read from the catalogue's files."""

from __future__ import annotations

import urllib.error
from typing import Any

from coderai.catalogue.entries import ModelEntry
from coderai.catalogue.file_format import detect_format
from coderai.catalogue.model_facts import from_file
from coderai.cli.local_server import request_json, server_url
from coderai.config import Config
from coderai.errors import ConfigError, ModelFileError


def from_server(config: Config) -> list[dict[str, Any]] | None:
    """The server's model objects; None when no server answers."""
    url = server_url(config)
    try:
        listed = request_json(f"{url}/v1/models", config.auth.admin_key or "none")
    except urllib.error.HTTPError as exc:
        raise ConfigError(f"the server at {url} answered {exc.code}: give the config that"
                          " holds its admin key (--config)") from None  # fmt: skip
    except (urllib.error.URLError, OSError, ValueError):
        return None
    data: list[dict[str, Any]] = listed.get("data", [])
    return data


def from_files(entries: list[ModelEntry]) -> list[dict[str, Any]]:
    """Model objects as /v1/models gives them, from the files alone (nothing is loaded)."""
    out = []
    for entry in entries:
        try:
            fmt: str | None = entry.format or detect_format(entry.path)
        except (ModelFileError, OSError):
            fmt = None
        facts = from_file(entry, fmt)
        out.append({"id": entry.id, "context_length": facts.context,
                    "capabilities": facts.capabilities(), "loaded_on": None})  # fmt: skip
    return out


def rows(models: list[dict[str, Any]]) -> list[str]:
    """One tab-separated line per model: id, context, capabilities, where it is loaded."""
    lines = ["ID\tCONTEXT\tCAN\tLOADED"]
    for m in models:
        context = f"{m['context_length']:,}" if m.get("context_length") else "?"
        can = ",".join(m.get("capabilities") or []) or "-"
        where = m.get("loaded_on")
        if where is None:
            loaded = "(no server running)"
        elif not where:
            loaded = "no"
        else:
            loaded = ", ".join(
                f"{w['engine']} ({'busy' if w.get('busy') else f'idle {_ago(w)}'})" for w in where
            )
        lines.append(f"{m['id']}\t{context}\t{can}\t{loaded}")
    return lines


def _ago(where: dict[str, Any]) -> str:
    seconds = float(where.get("idle_seconds") or 0)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
