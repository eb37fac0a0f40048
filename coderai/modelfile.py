"""A model's format, read from the file itself (never guessed from its name)."""

from __future__ import annotations

from pathlib import Path

from coderai.errors import ModelFileError

GGUF_MAGIC = b"GGUF"


def detect_format(path: str) -> str:
    """gguf (magic bytes) or transformers (a folder holding config.json)."""
    p = Path(path)
    if p.is_dir():
        if (p / "config.json").is_file():
            return "transformers"
        raise ModelFileError(f"model folder {path} has no config.json")
    try:
        with open(p, "rb") as fh:
            head = fh.read(4)
    except OSError as exc:
        raise ModelFileError(f"cannot open model file {path}: {exc.strerror}") from None
    if head == GGUF_MAGIC:
        return "gguf"
    raise ModelFileError(f"model file {path} is neither GGUF nor a transformers folder")


def required_capability(fmt: str, options: dict[str, object]) -> str:
    """The engine capability a model needs: its format, except that a GGUF may ask for the
    transformers backend (options.backend = "transformers") instead of llama.cpp."""
    if fmt == "gguf" and options.get("backend") == "transformers":
        return "transformers"
    return fmt
