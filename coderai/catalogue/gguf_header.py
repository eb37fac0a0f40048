"""A GGUF file's metadata, skimmed from its header without llama.cpp: each scalar value,
and each array's length (a vocabulary of 262,144 strings is skipped, not built). The
`gguf` package reads the same header into numpy arrays in 3-12 s for the models we ship
(SmolLM2, Gemma 3 270M); this reads what a memory estimate needs in a fraction of that,
in the front, which imports no model library.

Format: "GGUF", version (3), tensor count, key count, then each key (a string), its type
and its value; strings are a u64 length and bytes, arrays an element type, a count and
the elements."""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import BinaryIO

_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
            12: "d"}  # fmt: skip
_STRING, _ARRAY = 8, 9
#: a header larger than this is not a model's (a corrupt length would read forever)
_MOST_KEYS = 1 << 16
#: arrays of numbers at most this long are read as values (per-layer counts), longer ones
#: (a vocabulary's scores) as their length
_SHORT = 4096
_DEEPEST = 8


class NotGguf(ValueError):
    pass


Value = int | float | bool | str


def _read(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise NotGguf("the header ends early")
    return data


def _unpack(f: BinaryIO, code: str) -> Value:
    fmt = "<" + code
    value: Value = struct.unpack(fmt, _read(f, struct.calcsize(fmt)))[0]
    return value


def _string(f: BinaryIO) -> str:
    length = int(_unpack(f, "Q"))
    if length > 1 << 24:
        raise NotGguf("a string longer than 16 MiB")
    return _read(f, length).decode("utf-8", errors="replace")


def _skip_array(f: BinaryIO, kind: int, count: int, size: int, depth: int = 0) -> None:
    if depth > _DEEPEST:
        raise NotGguf(f"arrays nested more than {_DEEPEST} deep")
    if kind in _SCALARS:
        f.seek(struct.calcsize("<" + _SCALARS[kind]) * count, 1)
    elif kind == _STRING:
        if count > size // 8:
            raise NotGguf(f"{count} strings in a file of {size} bytes")
        for _ in range(count):
            f.seek(int(_unpack(f, "Q")), 1)
    elif kind == _ARRAY:
        if count > size // 12:
            raise NotGguf(f"{count} arrays in a file of {size} bytes")
        for _ in range(count):
            inner, n = int(_unpack(f, "I")), int(_unpack(f, "Q"))
            _skip_array(f, inner, n, size, depth + 1)
    else:
        raise NotGguf(f"unknown value type {kind}")
    if f.tell() > size:
        raise NotGguf("an array runs past the end of the file")


def _numbers(f: BinaryIO, kind: int, count: int) -> tuple[Value, ...]:
    """A short array of numbers or flags (a per-layer count), read whole."""
    code = "<" + _SCALARS[kind] * count
    values: tuple[Value, ...] = struct.unpack(code, _read(f, struct.calcsize(code)))
    return values


def read(path: str | Path) -> dict[str, Value | tuple[Value, ...]]:
    """Every key's value: a short array of numbers as a tuple, any other array as its
    length (a vocabulary's tokens: their count)."""
    size = os.path.getsize(path)
    with open(path, "rb", buffering=1 << 16) as f:
        if _read(f, 4) != b"GGUF":
            raise NotGguf(f"{path} is not a GGUF file")
        version = int(_unpack(f, "I"))
        if version < 2:
            raise NotGguf(f"GGUF version {version} is too old")
        _tensors, keys = int(_unpack(f, "Q")), int(_unpack(f, "Q"))
        if keys > _MOST_KEYS:
            raise NotGguf(f"{keys} metadata keys")
        out: dict[str, Value | tuple[Value, ...]] = {}
        for _ in range(keys):
            key = _string(f)
            kind = int(_unpack(f, "I"))
            if kind in _SCALARS:
                out[key] = _unpack(f, _SCALARS[kind])
            elif kind == _STRING:
                out[key] = _string(f)
            elif kind == _ARRAY:
                inner, count = int(_unpack(f, "I")), int(_unpack(f, "Q"))
                if inner in _SCALARS and count <= _SHORT:
                    out[key] = _numbers(f, inner, count)
                else:
                    _skip_array(f, inner, count, size)
                    out[key] = count
            else:
                raise NotGguf(f"unknown value type {kind} for {key}")
        return out
