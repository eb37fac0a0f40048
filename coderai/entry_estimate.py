"""A catalogue entry's memory estimate (model_memory.py), read from its files: the GGUF's
header and size (every part of a split one), or a transformers folder's config and
safetensors. Blocking file I/O: the front calls it from a thread."""

from __future__ import annotations

import json
import re
from pathlib import Path

from coderai import gguf_header, model_memory
from coderai.config import ModelEntry
from coderai.errors import ModelFileError
from coderai.modelfile import detect_format

_SHARD = re.compile(r"-00001-of-(\d{5})\.gguf$")


def _gguf_bytes(path: Path) -> int:
    """The file's size, and its other parts' where it is the first of a split model."""
    shard = _SHARD.search(path.name)
    if shard is None:
        return path.stat().st_size
    total = int(shard.group(1))
    stem = path.name[: shard.start()]
    parts = [path.with_name(f"{stem}-{i:05d}-of-{total:05d}.gguf") for i in range(1, total + 1)]
    return sum(p.stat().st_size for p in parts if p.exists())


def estimate(entry: ModelEntry, room: int, on_gpu: bool, where: str) -> model_memory.Estimate:
    """Raises ModelFileError for a file that cannot be read, or a format with no estimate."""
    options = entry.options
    if entry.format == "fake":
        weights = int(float(options.get("memory_mb", 0)) * (1 << 20))
        context = int(options.get("context", 4096))
        return model_memory.Estimate(context, context, weights, 0, 0, where, room,
                                     context if weights <= room else 0)  # fmt: skip
    fmt = entry.format or detect_format(entry.path)
    path = Path(entry.path)
    try:
        if fmt == "gguf":
            meta = gguf_header.read(path)
            return model_memory.for_gguf(meta, _gguf_bytes(path), options, on_gpu, room, where)
        config = json.loads((path / "config.json").read_text())
        weights = sum(p.stat().st_size for p in path.glob("*.safetensors"))
        return model_memory.for_transformers(config, weights, options, room, where)
    except (OSError, ValueError) as exc:
        raise ModelFileError(f"cannot read {entry.path} for an estimate: {exc}") from None


def host_room() -> int:
    """Bytes of RAM available on this machine now."""
    import psutil

    return int(psutil.virtual_memory().available)


def mib(n: int) -> str:
    return f"{n / (1 << 20):,.0f} MiB" if n < 10 << 30 else f"{n / (1 << 30):,.1f} GiB"
