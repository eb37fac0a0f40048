"""A catalogue entry's memory estimate (model_memory.py), read from its files: the GGUF's
header and size (every part of a split one), or a transformers folder's config and
safetensors. Blocking file I/O: the front calls it from a thread."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from coderai.catalogue import gguf_header, model_memory
from coderai.catalogue.entries import ModelEntry
from coderai.catalogue.file_format import detect_format
from coderai.catalogue.model_scan import shard
from coderai.errors import ModelFileError, NotAFileOrFolder


def _gguf_bytes(path: Path) -> int:
    """The file's size, and its other parts' where it is the first of a split model."""
    first = shard(path.name)
    if first is None or first.part != 1:
        return path.stat().st_size
    stem, total = first.stem, first.total
    parts = [path.with_name(f"{stem}-{i:05d}-of-{total:05d}.gguf") for i in range(1, total + 1)]
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        raise ModelFileError(f"{path} is split in {total} parts; missing {', '.join(missing)}")
    return sum(p.stat().st_size for p in parts)


def _projector_bytes(mmproj: object) -> int:
    """The size of an entry's vision projector (0 without one; the engine refuses one
    that is missing, naming it)."""
    if not isinstance(mmproj, str):
        return 0
    projector = Path(mmproj)
    return projector.stat().st_size if projector.is_file() else 0


def _plain(path: Path) -> None:
    """Only a regular file or a folder is read: opening a FIFO would wait for a writer."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise ModelFileError(f"cannot read {path}: {exc.strerror}") from None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise NotAFileOrFolder(f"{path} is neither a file nor a folder")


def estimate(entry: ModelEntry, room: int, on_gpu: bool, where: str,
             allowance: int | None = None) -> model_memory.Estimate:  # fmt: skip
    """The entry's estimate against `room` bytes where it loads; `allowance` is the host
    RAM the engine sizes an unset context from (default: `room`). Raises ModelFileError for
    a file that cannot be read."""
    options = entry.options
    allowance = room if allowance is None else allowance
    if entry.format == "fake":
        weights = int(float(options.get("memory_mb", 0)) * (1 << 20))
        context = int(options.get("context", 4096))
        return model_memory.Estimate(context, context, weights, 0, 0, where, room,
                                     context if weights <= room else 0)  # fmt: skip
    path = Path(entry.path)
    _plain(path)
    fmt = entry.format or detect_format(entry.path)
    try:
        if fmt == "gguf":
            if not path.is_file():
                raise ModelFileError(f"{path} is not a GGUF file")
            meta = gguf_header.read(path)
            # llama.cpp offloads every layer to a card unless the entry says otherwise
            gpu = on_gpu and options.get("n_gpu_layers", -1) != 0
            # a vision projector's weights load beside the model's (vision.py)
            weights = _gguf_bytes(path) + _projector_bytes(options.get("mmproj"))
            return model_memory.for_gguf(meta, weights, options, gpu, allowance,
                                         room if gpu or not on_gpu else allowance,
                                         where if gpu or not on_gpu else "RAM")  # fmt: skip
        config = json.loads((path / "config.json").read_text())
        if not isinstance(config, dict):
            raise ModelFileError(f"{path}/config.json is not a JSON object")
        weights = sum(p.stat().st_size for p in path.glob("*.safetensors")) or sum(
            p.stat().st_size for p in path.glob("pytorch_model*.bin")
        )
        return model_memory.for_transformers(config, weights, options, on_gpu, room, where)
    except ModelFileError:
        raise
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise ModelFileError(f"cannot read {entry.path} for an estimate: {exc}") from None


def host_room() -> int:
    """Bytes of RAM available on this machine now."""
    import psutil

    return int(psutil.virtual_memory().available)


def mib(n: int) -> str:
    return f"{n / (1 << 20):,.0f} MiB" if n < 10 << 30 else f"{n / (1 << 30):,.1f} GiB"
