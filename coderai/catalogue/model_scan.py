"""The models already on this machine, found where other tools keep them, each proposed as
a catalogue entry that points at the files in place (weights are never copied):

- the Hugging Face cache (`models--ORG--NAME/snapshots/REV/`): each GGUF as `ORG/NAME:QUANT`
  (the quantisation from its file name; a split model by its first part; a vision
  projector is no model), a transformers repo (config.json and weights) as `ORG/NAME`;
- Ollama's store: each manifest `HOST/NAMESPACE/MODEL/TAG` names the GGUF blob of
  `MODEL:TAG` (`NAMESPACE/MODEL:TAG` beyond the library, `HOST/…` beyond Ollama's
  registry);
- LM Studio's models folder (`PUBLISHER/REPO/FILE.gguf`), as `PUBLISHER/REPO:QUANT`;
- folders the operator names: each GGUF by its file name, each transformers folder by its
  own.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from huggingface_hub import constants

from coderai.catalogue.entries import ModelEntry

_QUANT = re.compile(
    r"(?i)[-._](I?Q\d(?:_[A-Z0-9]+)*|TQ\d_\d|MXFP4(?:_MOE)?|F16|BF16|F32)(?=\.gguf$|[-._])"
)
_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
_WEIGHTS = ("*.safetensors", "pytorch_model*.bin")
OLLAMA_REGISTRY = "registry.ollama.ai"
#: how deep an operator's folder is looked into (ORG/REPO/QUANT/FILE is 3 folders down)
FOLDER_DEPTH = 5
OLLAMA_MODEL = "application/vnd.ollama.image.model"


@dataclass(frozen=True)
class Found:
    """A model found: the id proposed, its files, its format and where it was found."""

    id: str
    path: str
    format: str
    source: str


@dataclass(frozen=True)
class Places:
    """Where to look (a place that does not exist is skipped)."""

    hf_cache: Path | None = None
    ollama: Path | None = None
    lmstudio: tuple[Path, ...] = ()
    folders: tuple[Path, ...] = ()

    @classmethod
    def default(cls, folders: tuple[Path, ...] = ()) -> Places:
        """The stores' own places, as their tools' environment variables set them."""
        home = Path.home()
        hf = constants.HF_HUB_CACHE  # as the hub's library reads its variables
        ollama = os.environ.get("OLLAMA_MODELS") or home / ".ollama" / "models"
        lmstudio = (home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models")
        return cls(Path(hf), Path(ollama), lmstudio, folders)


class Shard(NamedTuple):
    """A part of a split GGUF, `STEM-00002-of-00005.gguf`: its stem, number and count."""

    stem: str
    part: int
    total: int


def shard(name: str) -> Shard | None:
    """The part a GGUF's name says it is; None for a whole file."""
    found = _SHARD.search(name)
    if found is None:
        return None
    return Shard(name[: found.start()], int(found.group(1)), int(found.group(2)))


def is_projector(name: str) -> bool:
    """A vision projector (`mmproj-…`), which is no model by itself."""
    return name.rsplit("/", 1)[-1].lower().startswith("mmproj")


def quant(name: str) -> str:
    """A GGUF file's quantisation from its name (`Q4_K_M`, `IQ2_XS`, `F16`); "" if none."""
    found = _QUANT.findall(name)
    return found[-1].upper() if found else ""


def _is_gguf(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def _ggufs(folder: Path) -> Iterator[Path]:
    """A folder's model GGUFs: no projector, a split model by its first part only."""
    for path in sorted(folder.glob("*.gguf")):
        part = shard(path.name)
        if not is_projector(path.name) and (part is None or part.part == 1):
            yield path


def _is_transformers(folder: Path) -> bool:
    return (folder / "config.json").is_file() and any(
        any(folder.glob(pattern)) for pattern in _WEIGHTS
    )


def _named(base: str, path: Path) -> str:
    tag = quant(path.name)
    return f"{base}:{tag}" if tag else f"{base}:{path.stem}"


def hf_cache(root: Path) -> Iterator[Found]:
    for repo in sorted(root.glob("models--*")):
        name = repo.name.removeprefix("models--").replace("--", "/")
        snapshots = sorted((repo / "snapshots").glob("*"), key=lambda p: p.stat().st_mtime)
        if not snapshots:
            continue
        latest = snapshots[-1]  # the revision fetched last
        for path in _ggufs(latest):
            yield Found(_named(name, path), str(path), "gguf", "huggingface")
        if _is_transformers(latest):
            yield Found(name, str(latest), "transformers", "huggingface")


def ollama(root: Path) -> Iterator[Found]:
    manifests = root / "manifests"
    for manifest in sorted(p for p in manifests.glob("*/*/*/*") if p.is_file()):
        host, namespace, model, tag = manifest.relative_to(manifests).parts
        try:
            layers = json.loads(manifest.read_text()).get("layers", [])
        except (OSError, ValueError, AttributeError):
            continue
        digests = [
            layer.get("digest", "")
            for layer in layers
            if isinstance(layer, dict) and layer.get("mediaType") == OLLAMA_MODEL
        ]
        if not digests or not isinstance(digests[0], str):
            continue
        blob = root / "blobs" / digests[0].replace(":", "-")
        if not _is_gguf(blob):
            continue
        name = model if namespace == "library" else f"{namespace}/{model}"
        if host != OLLAMA_REGISTRY:
            name = f"{host}/{name}"
        yield Found(f"{name}:{tag}", str(blob), "gguf", "ollama")


def lmstudio(root: Path) -> Iterator[Found]:
    for folder in sorted(p for p in root.glob("*/*") if p.is_dir()):
        base = "/".join(folder.relative_to(root).parts)
        for path in _ggufs(folder):
            yield Found(_named(base, path), str(path), "gguf", "lmstudio")


def _folders(root: Path) -> Iterator[Path]:
    """`root` and the folders below it, FOLDER_DEPTH deep at most, hidden ones left out: a
    folder named to scan may be a whole disk (the console lets an admin name any)."""
    for here, below, _ in os.walk(root):
        depth = len(Path(here).relative_to(root).parts)
        below[:] = [] if depth >= FOLDER_DEPTH else sorted(d for d in below if d[:1] != ".")
        yield Path(here)


def folder(root: Path) -> Iterator[Found]:
    folders = sorted(_folders(root))
    for here in folders:
        for path in _ggufs(here):
            yield Found(path.stem, str(path), "gguf", str(root))
    for here in folders:
        if _is_transformers(here):
            yield Found(here.name, str(here), "transformers", str(root))


def standing(found: Found, entries: Sequence[ModelEntry]) -> str:
    """What the catalogue makes of a model found: "new", "its id is taken", or "in the
    catalogue as ID" (an entry names the same file, by any path to it)."""
    real = os.path.realpath(found.path)
    for entry in entries:
        if entry.path and os.path.realpath(entry.path) == real:
            return f"in the catalogue as {entry.id}"
    if any(found.id in entry.names() for entry in entries):
        return "its id is taken"
    return "new"


def scan(places: Places) -> list[Found]:
    """Every model found, in the order of the places."""
    found: list[Found] = []
    if places.hf_cache is not None and places.hf_cache.is_dir():
        found += hf_cache(places.hf_cache)
    if places.ollama is not None and places.ollama.is_dir():
        found += ollama(places.ollama)
    for root in places.lmstudio:
        if root.is_dir():
            found += lmstudio(root)
    for root in places.folders:
        if root.is_dir():
            found += folder(root)
    return found
