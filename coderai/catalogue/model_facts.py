"""What a model is, as clients ask it of /v1/models (opencode, Cline and Continue read the
window from there; otherwise they assume one that is wrong for a local model): its context
window in tokens and what it can do (tools in its template, reasoning, vision).

Two sources, one shape. A loaded model's facts come from the engine that holds it (the
window it created, what its template was found to do: engine/pool.py reports them with
each resident). A model not loaded is described from its file: a GGUF's trained context
and template (read from its header, once per file version), a transformers folder's
config.json and tokenizer_config.json, the entry's own options first (`n_ctx`,
`chat_template`, `reasoning_format`, a fake model's `context`). The engine may create a
smaller window than the file's when memory is short; the answer once loaded says so."""

from __future__ import annotations

import contextlib
import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coderai.catalogue import gguf_header
from coderai.catalogue.entries import ModelEntry
from coderai.catalogue.templatefile import TEMPLATE_OPTION, template_text

#: markers of a template that writes thinking (Qwen3's and DeepSeek-R1's tags, gpt-oss's
#: channels): the engine's own reading is exact once loaded, this is the file's guess
_THINKING = ("<think>", "</think>", "<|channel|>")


@dataclass(frozen=True)
class ModelFacts:
    #: its context window in tokens (0: not known)
    context: int = 0
    #: its chat template renders tools (others get the fallback prompt that lists them)
    tools: bool = False
    reasoning: bool = False
    vision: bool = False

    def capabilities(self) -> list[str]:
        return [name for name in ("tools", "reasoning", "vision") if getattr(self, name)]


def sees_images(entry: ModelEntry) -> bool:
    """Whether the model reads images: its entry names a vision projector (`mmproj`)."""
    return entry.options.get("mmproj") is not None


def from_report(report: dict[str, Any]) -> ModelFacts:
    """A loaded instance's facts, as its engine's heartbeat reports them."""
    return ModelFacts(
        context=int(report.get("context") or 0),
        tools=bool(report.get("tools")),
        reasoning=bool(report.get("reasoning")),
        vision=bool(report.get("vision")),
    )


def from_file(entry: ModelEntry, fmt: str | None) -> ModelFacts:
    """A model's facts from its catalogue entry and its files (`fmt`: the format probed
    from them, None where they cannot be read)."""
    options = entry.options
    template = options.get(TEMPLATE_OPTION)
    own_template: str | None = None
    context = 0
    try:
        if fmt == "fake":
            context = int(options.get("context") or 0)
            return ModelFacts(context, tools=True, reasoning=_reasons(options, None))
        if fmt == "gguf":
            context, own_template = _gguf(entry.path, *_version(entry.path))
        elif fmt == "transformers":  # the files read, not the folder, say when it changed
            context, own_template = _folder(entry.path, *_version(f"{entry.path}/config.json"))
    except (OSError, ValueError, gguf_header.NotGguf):
        pass  # a file that cannot be read now: what is known is left out, never invented
    if isinstance(template, str):
        with contextlib.suppress(OSError, ValueError):
            own_template = template_text(template)
    context = int(options.get("n_ctx") or 0) or context
    source = own_template or ""
    return ModelFacts(context, tools="tools" in source, reasoning=_reasons(options, source),
                      vision=sees_images(entry))  # fmt: skip


def _reasons(options: dict[str, Any], template: str | None) -> bool:
    chosen = options.get("reasoning_format")
    if chosen is not None:
        return bool(chosen != "none")
    return any(marker in (template or "") for marker in _THINKING)


def _version(path: str) -> tuple[int, int]:
    """What changes when the file does (its size and modification time): the cache key."""
    stat = os.stat(path)
    return stat.st_size, stat.st_mtime_ns


@functools.lru_cache(maxsize=64)
def _gguf(path: str, _size: int, _mtime: int) -> tuple[int, str | None]:
    meta = gguf_header.read(path)
    arch = str(meta.get("general.architecture", ""))
    context = meta.get(f"{arch}.context_length", 0)
    template = meta.get("tokenizer.chat_template")
    return (int(context) if isinstance(context, int | float) else 0,
            template if isinstance(template, str) else None)  # fmt: skip


@functools.lru_cache(maxsize=64)
def _folder(path: str, _size: int, _mtime: int) -> tuple[int, str | None]:
    folder = Path(path)
    config = json.loads((folder / "config.json").read_text())
    text = config.get("text_config", config)  # a multimodal model's language model
    context = int(text.get("max_position_embeddings") or 0)
    template = None
    jinja = folder / "chat_template.jinja"
    if jinja.exists():
        template = jinja.read_text()
    elif (folder / "tokenizer_config.json").exists():
        found = json.loads((folder / "tokenizer_config.json").read_text()).get("chat_template")
        template = found if isinstance(found, str) else json.dumps(found)
    return context, template
