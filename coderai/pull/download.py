"""A plan's files fetched with the Hugging Face client library into the hub's own cache
(`models--ORG--NAME/blobs` and `snapshots/COMMIT/`), where the hub's other tools and
`coderai models scan` find them.

The library does the transfer: a cut connection is resumed where it stopped (an HTTP Range
request, up to five tries without progress), and a file already in the cache is not fetched
again, so a pull cut short between files goes on from the first file it lacks. What it does
not do is done here: each file is checked against the checksum the hub lists for it (the LFS
sha256, or the git blob id) and removed if it differs; the room a download needs is checked
before it starts (the library only warns); and each failure becomes one clear sentence.

Blocking I/O: the CLI calls it directly, the front from a worker thread.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from huggingface_hub import HfApi, constants, get_token, hf_hub_download, try_to_load_from_cache
from huggingface_hub import errors as hub_errors
from huggingface_hub.hf_api import RepoSibling
from huggingface_hub.utils.tqdm import tqdm as hf_tqdm

from coderai.errors import CoderaiError
from coderai.pull.plan import Plan, PlanError, RepoFile, parse, plan
from coderai.pull.plan import with_projector as _with_projector

DEFAULT_ENDPOINT = "https://huggingface.co"
#: room kept free beyond the download itself (the cache's lock and link files)
MARGIN = 1 << 20
_CHUNK = 1 << 20


class PullError(CoderaiError):
    """A pull that cannot go on; the message says why and what to do."""

    status = 502
    code = "pull_failed"


class PullRefused(PullError):
    """What was asked for is not there, or not to be had (a missing repo or file, a gated
    one): asking again will not help."""

    status = 400
    error_type = "invalid_request_error"
    code = "pull_refused"


class Cancelled(PullError):
    status = 409
    code = "pull_cancelled"


@dataclass(frozen=True)
class Hub:
    """Where to fetch from and to: the hub's own environment variables unless given."""

    endpoint: str
    cache: Path
    token: str | None = None

    @classmethod
    def from_env(cls, endpoint: str | None = None) -> Hub:
        """The cache the library itself uses (HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME), and
        its token (HF_TOKEN, or the one `hf auth login` stored)."""
        where = endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
        return cls(where.rstrip("/"), Path(constants.HF_HUB_CACHE), get_token())


@dataclass
class Progress:
    """Bytes of a pull done so far, told to `report` as they arrive (from the pulling
    thread); `cancel()` from any thread stops the pull at its next chunk."""

    report: Callable[[Progress], None] = lambda _: None
    total: int = 0
    done: int = 0
    file: str = ""
    _before: int = 0  # bytes of the files finished before this one
    _cancelled: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def start(self, name: str) -> None:
        self.check()
        self.file = name
        self.report(self)

    def advance(self, n: int) -> None:
        self.check()
        self.done += n
        self.report(self)

    def check(self) -> None:
        """Raise Cancelled once the pull has been cancelled."""
        if self.cancelled:
            raise Cancelled("the pull was cancelled")

    def finish(self, size: int) -> None:
        self._before += size
        self.done = self._before
        self.report(self)


def _meter(progress: Progress) -> type[hf_tqdm]:
    """The progress-bar class the library is given: a bar that draws nothing and counts
    into `progress`. It is the library's own bar class, so that its Xet download path
    (which reads and sets the bar's attributes) finds what it uses; that path swallows
    what a bar raises, so a cancel reaches a Xet download only between files."""

    class Meter(hf_tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
            progress.done = progress._before + int(kwargs.get("initial") or 0)

        def update(self, n: int | float | None = 1) -> bool | None:
            progress.advance(int(n or 0))
            return None

        def update_transfer(self, n: int) -> None:
            """Network bytes (Xet counts them apart from those written): not shown."""

        def set_transfer_postfix_str(self, *args: Any, **kwargs: Any) -> None:
            """The network rate Xet reports: not shown."""

    return Meter


@contextmanager
def _plain_errors(hub: Hub, repo: str) -> Iterator[None]:
    """The library's and the network's failures, as one sentence each."""
    try:
        yield
    except PullError:
        raise
    except hub_errors.GatedRepoError:
        raise PullRefused(f"{repo} is gated: accept its terms on its page on the hub, then set "
                        "HF_TOKEN to a token of that account") from None  # fmt: skip
    except hub_errors.RepositoryNotFoundError:
        hint = "" if hub.token else " (if it is private, set HF_TOKEN)"
        raise PullRefused(f"{hub.endpoint} has no repo {repo}{hint}") from None
    except hub_errors.RevisionNotFoundError as exc:
        raise PullRefused(f"{repo}: {exc}") from None
    except hub_errors.OfflineModeIsEnabled:
        raise PullError("HF_HUB_OFFLINE is set: unset it to fetch from the hub") from None
    except hub_errors.HFValidationError as exc:
        raise PullRefused(f"{repo} is not a name the hub takes: {exc}") from None
    except (httpx2.TransportError, hub_errors.LocalEntryNotFoundError) as exc:
        raise PullError(f"cannot reach {hub.endpoint} ({exc.__class__.__name__}: "
                        f"{str(exc)[:200]}); is this machine online?") from None  # fmt: skip
    except hub_errors.HfHubHTTPError as exc:
        raise PullError(f"{hub.endpoint} refused {repo}: {str(exc)[:300]}") from None
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise PullError(f"the disk holding {hub.cache} is full; the partial file was "
                            "removed") from None  # fmt: skip
        raise PullError(f"{repo}: {' '.join(str(exc).split())[:300]}") from None
    except Exception as exc:  # the library's own (a Xet download's, one over 50 GB)
        raise PullError(f"{repo}: {exc.__class__.__name__}: {str(exc)[:300]}") from None


def resolve(hub: Hub, text: str) -> tuple[Plan, str]:
    """The plan for `text` and the commit it names, from the hub's listing of the repo."""
    try:
        request = parse(text)
        with _plain_errors(hub, request.repo):
            info = HfApi(endpoint=hub.endpoint, token=hub.token).model_info(
                request.repo, files_metadata=True
            )
        files = [_listed(s) for s in info.siblings or []]
        if not info.sha:
            raise PullError(f"{hub.endpoint} named no commit for {request.repo}")
        return plan(request, files), info.sha
    except PlanError as exc:
        raise PullRefused(str(exc)) from None


def _listed(sibling: RepoSibling) -> RepoFile:
    lfs = sibling.lfs
    if lfs is not None:
        return RepoFile(sibling.rfilename, lfs.size, lfs.sha256, sibling.blob_id)
    return RepoFile(sibling.rfilename, sibling.size or 0, None, sibling.blob_id)


def _cached(hub: Hub, repo: str, commit: str, name: str) -> Path | None:
    found = try_to_load_from_cache(repo, name, cache_dir=hub.cache, revision=commit)
    return Path(found) if isinstance(found, str) else None


def _room(hub: Hub, needed: int) -> None:
    where = hub.cache
    while not where.exists() and where != where.parent:
        where = where.parent
    free = shutil.disk_usage(where).free
    if needed + MARGIN > free:
        raise PullError(f"not enough disk: the download needs {needed / 1e9:.2f} GB at "
                        f"{hub.cache}, and {free / 1e9:.2f} GB is free")  # fmt: skip


def _digest(path: Path, f: RepoFile) -> tuple[str, str]:
    """(expected, found): the LFS sha256, or git's blob sha1 (`blob SIZE\\0` + the bytes)."""
    if f.sha256:
        h = hashlib.sha256()
        expected = f.sha256
    else:
        h = hashlib.sha1(f"blob {path.stat().st_size}\0".encode(), usedforsecurity=False)
        expected = f.blob_id or ""
    with path.open("rb") as src:
        while chunk := src.read(_CHUNK):
            h.update(chunk)
    return expected, h.hexdigest()


def _verify(path: Path, f: RepoFile, cached: bool) -> None:
    if not f.sha256 and not f.blob_id:
        return  # the hub listed no checksum: the library has checked the size
    expected, found = _digest(path, f)
    if found != expected:
        # the snapshot's link and the repo's blob it names (one step: a blob may itself
        # link to a store other repos share, which is not ours to remove)
        blob = path.parent / os.readlink(path) if path.is_symlink() else None
        path.unlink(missing_ok=True)
        if blob is not None and blob.parent.name == "blobs":
            blob.unlink(missing_ok=True)
        how = "in the cache was" if cached else "arrived"
        raise PullError(f"{f.name} {how} corrupt (checksum {found[:12]}…, the hub lists "
                        f"{expected[:12]}…); it was removed, pull again")  # fmt: skip


def fetch(hub: Hub, job: Plan, commit: str, progress: Progress | None = None) -> Path:
    """Download (or find in the cache) every file of `job`, each checked; the path the
    catalogue entry names. Raises PullError, leaving no file that failed its check."""
    progress = progress or Progress()
    progress.total = job.size
    paths: list[Path] = []
    with _plain_errors(hub, job.repo):
        missing = [f for f in job.files if _cached(hub, job.repo, commit, f.name) is None]
        _room(hub, sum(f.size for f in missing))
        for f in job.files:
            progress.start(f.name)
            local = hf_hub_download(job.repo, f.name, revision=commit, cache_dir=hub.cache,
                                    endpoint=hub.endpoint, token=hub.token,
                                    tqdm_class=_meter(progress))  # fmt: skip
            _verify(Path(local), f, cached=f not in missing)
            progress.finish(f.size)
            paths.append(Path(local))
        progress.check()  # a cancel that came while the last file was checked
        # the commit is the repo's main now: other tools find these files by that name
        refs = hub.cache / f"models--{job.repo.replace('/', '--')}" / "refs" / "main"
        refs.parent.mkdir(parents=True, exist_ok=True)
        refs.write_text(commit)
    if job.entry_file:
        return next(p for p, f in zip(paths, job.files, strict=True) if f.name == job.entry_file)
    return paths[0].parent


def projector_path(hub: Hub, job: Plan, commit: str) -> Path | None:
    """Where the plan's vision projector lies once fetched (None: it was not asked)."""
    if job.projector_file is None or job.projector_file not in job.files:
        return None
    return _cached(hub, job.repo, commit, job.projector_file.name)


def entry_fields(job: Plan, path: Path, projector: Path | None) -> dict[str, Any]:
    """The catalogue entry a pull makes (its id is the caller's)."""
    fields: dict[str, Any] = {"path": str(path), "format": job.format}
    if projector is not None:
        fields["options"] = {"mmproj": str(projector)}
    return fields


def with_projector(job: Plan) -> Plan:
    """The plan with its vision projector too, or PullRefused where the repo has none."""
    try:
        return _with_projector(job)
    except PlanError as exc:
        raise PullRefused(str(exc)) from None
