"""A model's format, read from the file itself (never guessed from its name)."""

from __future__ import annotations

import os
import stat

from coderai.errors import ModelFileError, NotAFileOrFolder

GGUF_MAGIC = b"GGUF"

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def detect_format(path: str) -> str:
    """gguf (magic bytes) or transformers (a folder holding config.json).

    The path's kind is read with stat before anything is opened: opening a FIFO waits for
    a writer, and opening a device can act on it."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise ModelFileError(f"cannot open model file {path}: {exc.strerror}") from None
    if stat.S_ISDIR(mode):
        if os.path.isfile(os.path.join(path, "config.json")):
            return "transformers"
        raise ModelFileError(f"model folder {path} has no config.json")
    if not stat.S_ISREG(mode):
        raise _refusal(path, mode)
    if _head(path) == GGUF_MAGIC:
        return "gguf"
    raise ModelFileError(f"model file {path} is neither GGUF nor a transformers folder")


def _refusal(path: str, mode: int) -> NotAFileOrFolder:
    kind = next((name for test, name in _KINDS if test(mode)), "a special file")
    return NotAFileOrFolder(f"model path {path} is {kind}, not a file or a folder")


def _head(path: str) -> bytes:
    """The first bytes of a regular file. O_NONBLOCK and the second look at the kind cover
    a path swapped for a FIFO after the stat."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise ModelFileError(f"cannot open model file {path}: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refusal(path, mode)
        return os.read(fd, len(GGUF_MAGIC))
    except OSError as exc:
        raise ModelFileError(f"cannot read model file {path}: {exc.strerror}") from None
    finally:
        os.close(fd)


def required_capability(fmt: str, options: dict[str, object]) -> str:
    """The engine capability a model needs: its format, except that a GGUF may ask for the
    transformers backend (options.backend = "transformers") instead of llama.cpp."""
    if fmt == "gguf" and options.get("backend") == "transformers":
        return "transformers"
    return fmt
