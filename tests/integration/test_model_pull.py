"""`coderai models pull` and the admin API's pulls, against a local server speaking the
hub's file API (tests/support/hub.py: the hub itself cannot be reached from here). The
download, its resume and the cache layout are the Hugging Face client library's; the
checksums, the room check, the errors and the catalogue entry are ours. The model files are
real: the tiny model, as GGUF and as transformers, which a server then serves."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.hub import Hub, HubRepo, serve
from tests.support.server import Server, serving

ADMIN = "test-admin-key"
#: past the library's 10 MiB read: a cut halfway is resumed from a Range, not from zero
BIG = 24 << 20


@pytest.fixture(scope="module")
def hub(tiny_models: tuple[Path, Path]) -> Iterator[Hub]:
    folder, gguf = tiny_models
    tiny = gguf.read_bytes()
    transformers = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    big = b"GGUF" + hashlib.sha256(b"seed").digest() * (BIG // 32)
    repos = {
        "acme/tiny-GGUF": HubRepo({"tiny-Q4_K_M.gguf": tiny, "tiny-Q8_0.gguf": tiny,
                                   "mmproj-tiny-F16.gguf": tiny[:64], "README.md": b"# tiny\n"}),
        "acme/tiny": HubRepo({**transformers, "README.md": b"# tiny\n"}),
        "acme/big-GGUF": HubRepo({"big-Q4_K_M.gguf": big}),
        "acme/gated-GGUF": HubRepo({"g-Q4_K_M.gguf": tiny}, gated_token="hf_letmein"),
        "acme/huge-GGUF": HubRepo({"huge-Q4_K_M.gguf": tiny},
                                  listed_sizes={"huge-Q4_K_M.gguf": 1 << 50}),
        # listed as small, so that only the disk itself can say it is full
        "acme/understated-GGUF": HubRepo({"u-Q4_K_M.gguf": big[: 8 << 20]},
                                         listed_sizes={"u-Q4_K_M.gguf": 1 << 20}),
    }  # fmt: skip
    with serve(Hub(repos)) as running:
        yield running


def pull(home: Path, endpoint: str, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    config = home / "config.json"
    if not config.exists():
        config.write_text(json.dumps({"server": {"port": 9}}))  # no server listens there
    full_env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HF_ENDPOINT": endpoint, **env}  # fmt: skip
    command = [sys.executable, "-m", "coderai", "models", "pull", *argv, "--config", str(config)]
    return subprocess.run(command, cwd=home, env=full_env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def catalogue(home: Path) -> dict[str, dict[str, Any]]:
    path = home / "models.json"
    if not path.exists():
        return {}
    return {e["id"]: e for e in json.loads(path.read_text())}


def blobs(home: Path, repo: str) -> list[Path]:
    folder = home / ".cache/huggingface/hub" / f"models--{repo.replace('/', '--')}" / "blobs"
    return sorted(folder.iterdir()) if folder.is_dir() else []


def gets(hub: Hub, name: str) -> list[str | None]:
    """The Range header of each GET of a file so far."""
    return [r for method, path, r in hub.requests if method == "GET" and path.endswith(name)]


def test_a_gguf_is_fetched_into_the_hub_cache_and_added(
    hub: Hub, tiny_models: tuple[Path, Path], tmp_path: Path
) -> None:
    done = pull(tmp_path, hub.url, "hf.co/acme/tiny-GGUF:Q8_0")
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.strip())
    assert path.read_bytes() == tiny_models[1].read_bytes()
    assert path.is_symlink() and path.resolve().parent.name == "blobs"  # the hub's layout
    assert "mmproj-tiny-F16.gguf (a vision projector) not fetched: pass --mmproj" in done.stderr
    assert "tiny-Q8_0.gguf: 0.5 of 0.5 MB (100%)" in done.stderr  # progress, a line a tenth
    entry = catalogue(tmp_path)["acme/tiny-GGUF:Q8_0"]
    assert entry == {"id": "acme/tiny-GGUF:Q8_0", "path": str(path), "format": "gguf"}
    # `models scan` knows the file as that entry
    config = str(tmp_path / "config.json")
    scan = subprocess.run([sys.executable, "-m", "coderai", "models", "scan", "--config", config],
                          cwd=tmp_path, env={"HOME": str(tmp_path)}, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert "acme/tiny-GGUF:Q8_0\tgguf\thuggingface\tin the catalogue as acme/tiny-GGUF:Q8_0" in (
        scan.stdout
    )
    again = pull(tmp_path, hub.url, "acme/tiny-GGUF:Q8_0")
    assert again.returncode == 2 and "has acme/tiny-GGUF:Q8_0 already" in again.stderr
    # under another id it is found in the cache, not fetched again
    before = len(gets(hub, "tiny-Q8_0.gguf"))
    other = pull(tmp_path, hub.url, "acme/tiny-GGUF:Q8_0", "--id", "tiny-again")
    assert other.returncode == 0, other.stderr
    assert len(gets(hub, "tiny-Q8_0.gguf")) == before
    assert catalogue(tmp_path)["tiny-again"]["path"] == str(path)


def test_mmproj_fetches_the_vision_projector_and_names_it_in_the_entry(
    hub: Hub, tmp_path: Path
) -> None:
    done = pull(tmp_path, hub.url, "acme/tiny-GGUF:Q8_0", "--mmproj", "--id", "seeing")
    assert done.returncode == 0, done.stderr
    entry = catalogue(tmp_path)["seeing"]
    projector = Path(entry["options"]["mmproj"])
    assert projector.name == "mmproj-tiny-F16.gguf" and projector.exists()
    assert gets(hub, "mmproj-tiny-F16.gguf")  # fetched from the hub
    none = pull(tmp_path, hub.url, "acme/tiny", "--mmproj")  # a repo with no projector
    assert none.returncode != 0 and "has no vision projector" in none.stderr


def test_a_cut_download_is_resumed_where_it_stopped(hub: Hub, tmp_path: Path) -> None:
    hub.cut_once.add("big-Q4_K_M.gguf")
    done = pull(tmp_path, hub.url, "acme/big-GGUF")
    assert done.returncode == 0, done.stderr
    ranges = gets(hub, "big-Q4_K_M.gguf")
    assert ranges[0] is None and len(ranges) == 2
    assert ranges[1] is not None and int(ranges[1].removeprefix("bytes=").rstrip("-")) >= 10 << 20
    expected = hub.repos["acme/big-GGUF"].files["big-Q4_K_M.gguf"]
    assert Path(done.stdout.strip()).read_bytes() == expected


def test_a_file_that_fails_its_checksum_is_removed_and_nothing_added(
    hub: Hub, tmp_path: Path
) -> None:
    hub.corrupt.add("tiny-Q4_K_M.gguf")
    try:
        done = pull(tmp_path, hub.url, "acme/tiny-GGUF")
    finally:
        hub.corrupt.discard("tiny-Q4_K_M.gguf")
    assert done.returncode == 2
    assert "tiny-Q4_K_M.gguf arrived corrupt" in done.stderr and "pull again" in done.stderr
    assert catalogue(tmp_path) == {}
    assert blobs(tmp_path, "acme/tiny-GGUF") == []
    fixed = pull(tmp_path, hub.url, "acme/tiny-GGUF")
    assert fixed.returncode == 0, fixed.stderr
    assert "acme/tiny-GGUF:Q4_K_M" in catalogue(tmp_path)


@pytest.mark.parametrize(
    ("model", "error"),
    [
        ("acme/nope", "has no repo acme/nope (if it is private, set HF_TOKEN)"),
        ("acme/tiny-GGUF:Q5_K_M", "acme/tiny-GGUF has no Q5_K_M GGUF; it has Q4_K_M, Q8_0"),
        ("acme/gated-GGUF", "acme/gated-GGUF is gated: accept its terms"),
        ("acme/huge-GGUF", "not enough disk: the download needs 1125899.91 GB"),
        ("acme", "'acme' is not user/repo[:QUANT] or user/repo/FILE"),
    ],
)
def test_what_cannot_be_fetched_ends_with_a_clear_error_and_no_entry(
    hub: Hub, tmp_path: Path, model: str, error: str
) -> None:
    done = pull(tmp_path, hub.url, model)
    assert done.returncode == 2
    assert error in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert catalogue(tmp_path) == {}
    assert gets(hub, "huge-Q4_K_M.gguf") == []  # refused before any byte was asked for


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real filesystem of 4 MiB (tmpfs), where this machine lets the tests mount one."""
    mount = tmp_path / "small"
    mount.mkdir()
    try:
        made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)],
                              capture_output=True, text=True)  # fmt: skip
    except OSError as exc:  # no mount command at all
        pytest.skip(f"no small filesystem can be mounted here: {exc}")
    if made.returncode != 0:
        pytest.skip(f"no small filesystem can be mounted here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)  # lazily: never a teardown error


def test_a_disk_that_fills_midway_ends_with_a_clear_error_and_no_partial_file(
    hub: Hub, tmp_path: Path, small_disk: Path
) -> None:
    cache = small_disk / "hf"
    done = pull(tmp_path, hub.url, "acme/understated-GGUF", HF_HUB_CACHE=str(cache))
    assert done.returncode == 2
    assert f"the disk holding {cache} is full; the partial file was removed" in done.stderr
    assert catalogue(tmp_path) == {}
    repo = cache / "models--acme--understated-GGUF"
    assert not [p for p in repo.rglob("*") if p.is_file() and p.stat().st_size > 0]


def test_a_gated_repo_is_fetched_with_a_token(hub: Hub, tmp_path: Path) -> None:
    done = pull(tmp_path, hub.url, "acme/gated-GGUF", HF_TOKEN="hf_letmein")
    assert done.returncode == 0, done.stderr
    assert "acme/gated-GGUF:Q4_K_M" in catalogue(tmp_path)


def test_no_network_is_said_as_such(tmp_path: Path) -> None:
    done = pull(tmp_path, "http://127.0.0.1:9", "acme/tiny-GGUF")
    assert done.returncode == 2
    assert "cannot reach http://127.0.0.1:9 (ConnectError" in done.stderr, done.stderr
    assert catalogue(tmp_path) == {}


def test_a_transformers_repo_is_fetched_as_its_snapshot_folder(
    hub: Hub, tiny_models: tuple[Path, Path], tmp_path: Path
) -> None:
    done = pull(tmp_path, hub.url, "acme/tiny")
    assert done.returncode == 0, done.stderr
    folder = Path(done.stdout.strip())
    assert folder.parent.name == "snapshots"
    assert (folder / "config.json").read_bytes() == (tiny_models[0] / "config.json").read_bytes()
    assert not (folder / "README.md").exists()
    assert catalogue(tmp_path)["acme/tiny"]["format"] == "transformers"


def events(srv: Server, until: Any) -> Iterator[dict[str, Any]]:
    """The console feed's pull events (and its pulls snapshot's), until `until(event)`."""
    headers = {"Authorization": f"Bearer {ADMIN}"}
    with httpx.stream("GET", f"{srv.url}/admin/api/events", headers=headers,
                      timeout=60) as feed:  # fmt: skip
        name = ""
        for line in feed.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: ") and name in ("pull", "pulls"):
                data = json.loads(line[6:])
                for event in data["pulls"] if name == "pulls" else [data]:
                    yield event
                    if until(event):
                        return


@pytest.fixture
def srv(hub: Hub, tmp_path: Path) -> Iterator[Server]:
    """A server whose hub is the stand-in, its cache in the test's folder."""
    env = {"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(tmp_path / "hf")}
    with serving(tmp_path / "server", {"engines": 1}, [{"id": "fake", "format": "fake"}], 1,
                 ADMIN, env=env) as running:  # fmt: skip
        yield running


def test_the_admin_api_pulls_while_serving_and_the_model_is_served_at_once(srv: Server) -> None:
    admin = {"Authorization": f"Bearer {ADMIN}"}
    refused = httpx.post(f"{srv.url}/admin/api/pulls", json={"model": "acme/nope"},
                         headers=admin, timeout=30)  # fmt: skip
    assert refused.status_code == 400 and "has no repo" in refused.json()["error"]["message"]
    started = httpx.post(f"{srv.url}/admin/api/pulls", json={"model": "acme/tiny-GGUF"},
                         headers=admin, timeout=30)  # fmt: skip
    assert started.status_code == 202, started.text
    pull_id = started.json()["id"]
    seen = list(events(srv, lambda e: e["id"] == pull_id and e["state"] not in
                       ("queued", "downloading", "adding")))  # fmt: skip
    assert seen[-1]["state"] == "done", seen[-1]
    assert seen[-1]["done"] == seen[-1]["total"] > 0
    body = {"model": "acme/tiny-GGUF:Q4_K_M", "prompt": "The quick", "max_tokens": 4}
    answer = httpx.post(f"{srv.url}/v1/completions", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    listed = httpx.get(f"{srv.url}/admin/api/models", headers=admin, timeout=30).json()
    assert "acme/tiny-GGUF:Q4_K_M" in [m["id"] for m in listed["models"]]
    taken = httpx.post(f"{srv.url}/admin/api/pulls", json={"model": "acme/tiny-GGUF"},
                       headers=admin, timeout=30)  # fmt: skip
    assert taken.status_code == 409 and taken.json()["error"]["param"] == "id"


def test_a_pull_cancelled_midway_leaves_no_file_and_no_entry(
    hub: Hub, srv: Server, tmp_path: Path
) -> None:
    release = hub.held.setdefault("big-Q4_K_M.gguf", threading.Event())
    admin = {"Authorization": f"Bearer {ADMIN}"}
    try:
        started = httpx.post(f"{srv.url}/admin/api/pulls", json={"model": "acme/big-GGUF"},
                             headers=admin, timeout=30)  # fmt: skip
        pull_id = started.json()["id"]
        midway = list(events(srv, lambda e: e["id"] == pull_id and e["done"] > 0))[-1]
        assert midway["state"] == "downloading" and 0 < midway["done"] < midway["total"]
        cancelled = httpx.delete(f"{srv.url}/admin/api/pulls/{pull_id}", headers=admin,
                                 timeout=30)  # fmt: skip
        assert cancelled.status_code == 200
        release.set()
        ended = list(events(srv, lambda e: e["id"] == pull_id and e["state"] == "cancelled"))
        assert ended[-1]["error"] is None
        listed = httpx.get(f"{srv.url}/admin/api/models", headers=admin, timeout=30).json()
        assert [m["id"] for m in listed["models"]] == ["fake"]
        cache = tmp_path / "hf" / "models--acme--big-GGUF"
        assert not [p for p in cache.rglob("*") if p.is_file()]  # no blob, no partial file
    finally:
        hub.held.pop("big-Q4_K_M.gguf", None)
        release.set()


def test_offline_mode_and_a_name_the_hub_refuses_are_said_as_such(hub: Hub, tmp_path: Path) -> None:
    offline = pull(tmp_path, hub.url, "acme/tiny-GGUF", HF_HUB_OFFLINE="1")
    assert offline.returncode == 2, offline.stderr
    assert "HF_HUB_OFFLINE is set: unset it to fetch from the hub" in offline.stderr
    refused = pull(tmp_path, hub.url, "acme/double--dash")  # the hub's names allow no "--"
    assert refused.returncode == 2, refused.stderr
    assert "acme/double--dash is not a name the hub takes" in refused.stderr
    assert "Traceback" not in offline.stderr + refused.stderr
    assert catalogue(tmp_path) == {}
