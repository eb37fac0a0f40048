"""What `user/repo[:QUANT|/FILE]` asks to fetch, decided from the repo's file listing alone
(no I/O here): the files, and the catalogue entry they make.

- `user/repo:QUANT` (default Q4_K_M): the repo's GGUF of that quantisation, every part of
  a split one; `user/repo/FILE`: that file (and its other parts, if it is split);
- a repo with no GGUF: a transformers model, its safetensors weights, config and tokenizer
  (pickled `.bin` weights are never fetched: loading them runs code);
- a vision projector (`mmproj-…`) is named, and fetched where asked (`with_projector`:
  `--mmproj`), the entry then naming it as its `mmproj` option.

Ids are those `coderai models scan` proposes for the same files in the cache, so a model
pulled is known as the same model when it is scanned."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from coderai.catalogue.model_scan import is_projector, quant, shard

DEFAULT_QUANT = "Q4_K_M"
_HOST = re.compile(r"^(?:https?://)?(?:www\.)?(?:huggingface\.co|hf\.co)/", re.IGNORECASE)
#: a file's page or download address: `USER/REPO/blob/REV/FILE`, `…/resolve/REV/FILE`
_FILE_PAGE = re.compile(r"^([^/]+/[^/]+)/(?:blob|resolve)/[^/]+/(.+)$")
_REPO = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
#: a transformers model's files besides its weights (the ones its loaders read)
_TRANSFORMERS_FILES = frozenset({
    "config.json", "generation_config.json", "model.safetensors.index.json",
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
    "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja",
    "chat_template.json",
})  # fmt: skip


class PlanError(ValueError):
    """The request names nothing this server can fetch; the message says what it could."""


@dataclass(frozen=True)
class Request:
    repo: str
    quant: str | None = None
    file: str | None = None


@dataclass(frozen=True)
class RepoFile:
    """One file as the hub lists it: its checksum is the LFS sha256, or else the git blob id."""

    name: str
    size: int
    sha256: str | None = None
    blob_id: str | None = None


@dataclass(frozen=True)
class Plan:
    repo: str
    #: the catalogue id the model will have
    id: str
    format: str
    files: tuple[RepoFile, ...]
    #: the file (GGUF: its first part) the entry points at; "" for a transformers folder
    entry_file: str
    #: a vision projector the repo has (fetched only where asked: with_projector)
    projector: str | None = None
    projector_file: RepoFile | None = None

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


def parse(text: str) -> Request:
    """`user/repo`, `user/repo:QUANT`, `user/repo/path/FILE.gguf`, with or without the
    hub's host in front (as `hf.co/…` in Ollama, or a pasted page address)."""
    spec = _HOST.sub("", text.strip()).split("?", 1)[0]
    page = _FILE_PAGE.match(spec)
    if page:
        spec = f"{page[1]}/{page[2]}"
    parts = spec.split("/")
    if len(parts) > 2:
        repo, file = "/".join(parts[:2]), "/".join(parts[2:])
        if not _REPO.fullmatch(repo) or not file or ":" in file:
            raise PlanError(f"{text!r} is not user/repo[:QUANT] or user/repo/FILE")
        return Request(repo, file=file)
    repo, _, tag = spec.partition(":")
    if not _REPO.fullmatch(repo) or (":" in spec and not re.fullmatch(r"[\w.-]+", tag)):
        raise PlanError(f"{text!r} is not user/repo[:QUANT] or user/repo/FILE")
    # Ollama's default tag names no quantisation: the repo's default is meant
    return Request(repo, quant=None if tag.lower() in ("", "latest") else tag.upper())


def _parts(first: str, ggufs: list[RepoFile]) -> list[RepoFile]:
    """A GGUF and, if it is split, all its parts in order."""
    whole = shard(first)
    if whole is None:
        return [f for f in ggufs if f.name == first]
    parts = sorted(
        (
            f
            for f in ggufs
            if (s := shard(f.name)) and (s.stem, s.total) == (whole.stem, whole.total)
        ),
        key=lambda f: f.name,
    )
    if len(parts) != whole.total:
        raise PlanError(f"{first} is split in {whole.total} parts and the repo has "
                        f"{len(parts)} of them")  # fmt: skip
    return parts


def _models(ggufs: list[RepoFile]) -> list[str]:
    """The first file of each model GGUF (a split model is one model)."""
    firsts = []
    for f in ggufs:
        part = shard(f.name)
        if not is_projector(f.name) and (part is None or part.part == 1):
            firsts.append(f.name)
    return sorted(firsts)


def _quant_of(name: str) -> str:
    """The quantisation a repo path names: in the file's name, or a folder's (`Q4_K_M/…`)."""
    *folders, base = name.split("/")
    return quant(base) or next((quant(f"-{d}.gguf") for d in folders if quant(f"-{d}.gguf")), "")


def _gguf_id(repo: str, name: str) -> str:
    stem = name.rsplit("/", 1)[-1].removesuffix(".gguf")
    return f"{repo}:{_quant_of(name) or stem}"


def _projector(ggufs: list[RepoFile]) -> RepoFile | None:
    """The repo's vision projector, at full precision where it has one so."""
    projectors = sorted((f for f in ggufs if is_projector(f.name)), key=lambda f: f.name)
    preferred = [f for f in projectors if quant(f.name) in ("F16", "BF16")]
    return next(iter(preferred or projectors), None)


def with_projector(job: Plan) -> Plan:
    """The plan with its vision projector fetched too (`--mmproj`)."""
    if job.projector_file is None:
        raise PlanError(f"{job.repo} has no vision projector (an mmproj-… GGUF)")
    return replace(job, files=(*job.files, job.projector_file))


def _plan_with(repo: str, model_id: str, parts: list[RepoFile], ggufs: list[RepoFile]) -> Plan:
    found = _projector(ggufs)
    return Plan(repo, model_id, "gguf", tuple(parts), parts[0].name,
                found.name if found else None, found)  # fmt: skip


def plan(request: Request, files: list[RepoFile]) -> Plan:
    ggufs = [f for f in files if f.name.lower().endswith(".gguf")]
    if request.file is not None:
        wanted = next((f for f in files if f.name == request.file), None)
        if wanted is None:
            raise PlanError(f"{request.repo} has no file {request.file!r}")
        if not wanted.name.lower().endswith(".gguf") or is_projector(wanted.name):
            raise PlanError(f"{request.file!r} is not a model GGUF; name one, or the repo")
        parts = _parts(wanted.name, ggufs)
        return _plan_with(request.repo, _gguf_id(request.repo, wanted.name), parts, ggufs)
    models = _models(ggufs)
    if models:
        return _gguf_plan(request, ggufs, models)
    if request.quant is not None:
        raise PlanError(f"{request.repo} has no GGUF files, so no {request.quant}")
    return _transformers_plan(request.repo, files)


def _gguf_plan(request: Request, ggufs: list[RepoFile], models: list[str]) -> Plan:
    wanted = request.quant or DEFAULT_QUANT
    chosen = [m for m in models if _quant_of(m) == wanted]
    if not chosen and request.quant is None and len(models) == 1:
        chosen = models  # the repo's only model, whatever its quantisation
    have = sorted({_quant_of(m) or m for m in models})
    if not chosen:
        raise PlanError(f"{request.repo} has no {wanted} GGUF; it has {', '.join(have)}")
    if len(chosen) > 1:
        raise PlanError(f"{request.repo} has {len(chosen)} {wanted} GGUFs ({', '.join(chosen)}):"
                        f" name one as {request.repo}/FILE")  # fmt: skip
    parts = _parts(chosen[0], ggufs)
    return _plan_with(request.repo, _gguf_id(request.repo, chosen[0]), parts, ggufs)


def _transformers_plan(repo: str, files: list[RepoFile]) -> Plan:
    top = [f for f in files if "/" not in f.name]
    names = {f.name for f in top}
    weights = [f for f in top if f.name.endswith(".safetensors")]
    if "config.json" not in names:
        raise PlanError(f"{repo} holds neither a GGUF nor a transformers model (no config.json)")
    if not weights:
        pickled = any(n.endswith(".bin") for n in names)
        why = " (only pickled .bin weights, which are not fetched)" if pickled else ""
        raise PlanError(f"{repo} has no safetensors weights{why}")
    chosen = [f for f in top if f.name in _TRANSFORMERS_FILES or f in weights]
    return Plan(repo, repo, "transformers", tuple(sorted(chosen, key=lambda f: f.name)), "")
