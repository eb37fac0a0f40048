"""The console in a real browser: headless Chromium, driven by Playwright's sync API,
against a real `coderai run` with two engines and fake models.

Chromium is the system's (/usr/bin/chromium; CI installs it), never Playwright's own
download. Without it these tests are skipped, and nothing else is."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from coderai.catalogue.defaults import embedded_gguf
from tests.support.hub import Hub, HubRepo, serve
from tests.support.server import REPO, Server

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = REPO / "docs" / "screenshots"
ADMIN_KEY = "admin-key-for-browser-tests"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
USER, PASSWORD = "operator", "a-long-password"
#: the fake model's reply length, in tokens
REPLY_TOKENS = 24
ENGINES: dict[str, Any] = {
    "engine_specs": [
        {"name": "alpha", "backend": "cpu"},
        # runs fake models only: pinning a GGUF model here is a pin it cannot honour
        {"name": "beta", "backend": "cpu", "capabilities": ["fake"]},
    ],
    "heartbeat_interval": 0.2,
    "drain_grace_seconds": 1.0,
}
MODELS: list[dict[str, Any]] = [
    # slow enough that a reply is seen arriving, fast enough not to wait for
    {"id": "chat", "format": "fake",
     "options": {"output_tokens": REPLY_TOKENS, "tokens_per_second": 40}},
    # never loaded: its stated format is all the catalogue needs
    {"id": "weights", "format": "gguf", "path": "/nonexistent/weights.gguf"},
]  # fmt: skip

#: the readings file that stands in for the machine's sensors (in the server's folder)
SENSORS = "sensors.json"


def set_cpu_temperature(workdir: Path, celsius: float) -> None:
    """What the engines' CPU sensor reads from now on (written whole, then renamed)."""
    tmp = workdir / (SENSORS + ".tmp")
    tmp.write_text(json.dumps({"cpu": {"temp": celsius}}))
    tmp.replace(workdir / SENSORS)


# engines start, restart and load while a test waits: Playwright's default of 5 s is short
expect.set_options(timeout=20_000)


# module-scoped: Playwright's sync API runs an event loop on this thread while it is open,
# and no later test (an asyncio.run of its own) may find one running
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (CI installs it: apt-get install chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def hub() -> Iterator[Hub]:
    """The stand-in for the Hugging Face hub (tests/support/hub.py), with SmolLM2's GGUF."""
    gguf = embedded_gguf()
    assert gguf is not None
    repos = {"acme/smol-GGUF": HubRepo({"smol-Q4_K_M.gguf": gguf.read_bytes()})}
    with serve(Hub(repos)) as running:
        yield running


def other_tools_store(home: Path) -> None:
    """What Ollama leaves in a home: a manifest naming a GGUF blob (SmolLM2's, linked)."""
    gguf = embedded_gguf()
    assert gguf is not None
    store = home / ".ollama" / "models"
    digest = "sha256-" + "ab" * 32
    (store / "blobs").mkdir(parents=True)
    (store / "blobs" / digest).symlink_to(gguf)
    manifest = store / "manifests/registry.ollama.ai/library/smollm2/135m"
    manifest.parent.mkdir(parents=True)
    layer = {"mediaType": "application/vnd.ollama.image.model", "digest": digest.replace("-", ":")}
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": [layer]}))


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, hub: Hub) -> Iterator[Server]:
    """Two engines; API keys required on /v1 (the console's session is let in too); the
    hub is the stand-in, and the home one where Ollama keeps a model."""
    workdir = tmp_path_factory.mktemp("console")
    auth = {"admin_key": ADMIN_KEY, "require_api_key": True}
    set_cpu_temperature(workdir, 50)
    home = workdir / "home"
    other_tools_store(home)
    env = {"CODERAI_SENSORS_FILE": str(workdir / SENSORS), "HF_ENDPOINT": hub.url,
           "HF_HUB_CACHE": str(workdir / "hf"), "HOME": str(home)}  # fmt: skip
    server = Server(workdir, ENGINES, MODELS, extra_config={"auth": auth}, env=env)
    try:
        server.wait_ready(2)
        subprocess.run(
            [sys.executable, "-m", "coderai", "users", "add", USER, "--password-stdin",
             "--config", str(workdir / "config.json")],
            input=PASSWORD + "\n", text=True, capture_output=True, check=True, cwd=workdir,
        )  # fmt: skip
        yield server
    finally:
        server.stop()


@pytest.fixture
def page(browser: Browser, srv: Server) -> Iterator[Page]:
    """The console's page in a fresh browser context, before anyone logs in; a script
    error on it fails the test."""
    context = browser.new_context(base_url=srv.url, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert not errors, f"the console's scripts failed: {errors}"


@pytest.fixture
def console(page: Page) -> Page:
    """The console, logged in (through the API, as the login form does), on Activity."""
    answer = page.request.post("/admin/api/login", data={"username": USER, "password": PASSWORD})
    assert answer.ok, answer.text()
    page.goto("/")
    expect(page.get_by_test_id("user")).to_have_text(USER)
    expect(page.get_by_test_id("feed")).to_have_text("live")
    return page


def screenshot(page: Page, name: str) -> None:
    """The page as the test left it, for docs/screenshots/ (overwritten each run)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SCREENSHOTS / f"{name}.png", full_page=True)
