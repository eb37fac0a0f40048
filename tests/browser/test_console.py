"""The operator's console, used as an operator uses it: each test drives real Chromium
through one behaviour and waits for what the live feed brings (never for a fixed time)."""

from __future__ import annotations

import os
import re
import signal
import threading

import httpx
import openai
import pytest
from playwright.sync_api import Locator, Page, expect

from tests.browser.conftest import (
    ADMIN,
    ADMIN_KEY,
    PASSWORD,
    REPLY_TOKENS,
    USER,
    screenshot,
    set_cpu_temperature,
)
from tests.support.hub import Hub
from tests.support.server import Server, expected_chat

pytestmark = pytest.mark.timeout(180)


def client(srv: Server, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.url + "/v1", api_key=key, max_retries=0)


def test_an_operator_logs_in_and_out(page: Page) -> None:
    page.goto("/")
    page.get_by_label("Username").fill(USER)
    page.get_by_label("Password").fill("not-the-password")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("status")).to_contain_text("wrong username or password")
    screenshot(page, "login")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Activity")).to_be_visible()
    expect(page.get_by_test_id("user")).to_have_text(USER)
    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_role("button", name="Log in")).to_be_visible()
    # the session is gone on the server too, not only forgotten by the page
    assert page.request.get("/admin/api/session").status == 401


def test_activity_shows_both_engines_and_each_request_under_its_engine(
    console: Page, srv: Server
) -> None:
    for name in ("alpha", "beta"):
        card = console.locator(f".engine[data-engine={name}]")
        expect(card.get_by_test_id("state")).to_have_text("ready")
        expect(card).to_contain_text(re.compile(r"pid \d+"))
    raw = client(srv, ADMIN_KEY).chat.completions.with_raw_response.create(
        model="chat", messages=[{"role": "user", "content": "activity"}]
    )
    engine = raw.headers["x-coderai-engine"]
    usage = raw.parse().usage
    assert usage is not None
    row = console.get_by_test_id(f"requests-{engine}").locator("tbody tr").first
    expect(row).to_contain_text("chat")
    expect(row).to_contain_text("completed (200)")
    expect(row).to_contain_text(f"{usage.prompt_tokens} → {usage.completion_tokens}")
    screenshot(console, "activity")


def test_a_hot_cpu_is_named_in_a_cooling_banner_per_engine_until_it_cools(
    console: Page, srv: Server
) -> None:
    # the readings file stands in for the sensors: the CPU over its 90 °C default
    set_cpu_temperature(srv.workdir, 95)
    banners = console.get_by_test_id("cooling").get_by_role("alert")
    expect(banners).to_have_count(2)
    for name in ("alpha", "beta"):
        banner = banners.and_(console.locator(f"[data-engine={name}]"))
        expect(banner).to_contain_text(f"Engine {name} is cooling down: the CPU is too hot")
        expect(banner).to_contain_text("at 95 °C; it goes on below 80 °C")
        card = console.locator(f".engine[data-engine={name}]")
        expect(card.get_by_test_id("state")).to_have_text("cooling")
    screenshot(console, "activity-cooling")
    set_cpu_temperature(srv.workdir, 60)
    expect(banners).to_have_count(0)
    for name in ("alpha", "beta"):
        card = console.locator(f".engine[data-engine={name}]")
        expect(card.get_by_test_id("state")).to_have_text("ready")


def test_a_restarted_engine_leaves_and_comes_back(console: Page) -> None:
    card = console.locator(".engine[data-engine=beta]")
    state = card.get_by_test_id("state")
    expect(state).to_have_text("ready")
    pid = card.get_by_text(re.compile(r"^pid \d+"))
    before = pid.text_content()
    # every state the card shows, however briefly, is recorded by the page itself
    console.evaluate(
        """() => {
            const badge = document.querySelector('.engine[data-engine=beta] [data-testid=state]');
            window.seen = [];
            new MutationObserver(() => window.seen.push(badge.textContent))
                .observe(badge, {childList: true, characterData: true, subtree: true});
        }"""
    )
    restart = card.get_by_role("button", name="Restart")
    restart.click()
    expect(card.get_by_role("button", name="Really restart?")).to_be_visible()
    card.get_by_role("button", name="Really restart?").click()
    expect(pid).not_to_have_text(before or "", timeout=60_000)
    expect(state).to_have_text("ready")
    seen = console.evaluate("window.seen")
    assert {"draining", "restarting", "starting", "missing"} & set(seen), seen
    expect(console.locator(".engine[data-engine=alpha]").get_by_test_id("state")).to_have_text(
        "ready"
    )
    screenshot(console, "activity-restart")


def test_a_drained_engine_stays_draining_until_restarted(console: Page) -> None:
    card = console.locator(".engine[data-engine=beta]")
    state = card.get_by_test_id("state")
    expect(state).to_have_text("ready")
    card.get_by_role("button", name="Drain").click()
    card.get_by_role("button", name="Really drain?").click()
    expect(state).to_have_text("draining")
    expect(card.get_by_role("button", name="Drain")).to_be_hidden()
    screenshot(console, "activity-draining")
    card.get_by_role("button", name="Restart").click()
    card.get_by_role("button", name="Really restart?").click()
    expect(state).to_have_text("ready", timeout=60_000)
    expect(card.get_by_role("button", name="Drain")).to_be_visible()


def test_an_engine_that_dies_shows_how_and_doing_what_until_it_dies_again(
    console: Page, srv: Server
) -> None:
    card = console.locator(".engine[data-engine=beta]")
    expect(card.get_by_test_id("state")).to_have_text("ready")
    (beta,) = [e for e in srv.health()["engines"] if e["name"] == "beta"]
    os.kill(beta["pid"], signal.SIGILL)  # what a CPU's trapping kernel does to it
    last = card.locator(".last-exit")
    expect(last).to_contain_text("died of SIGILL (illegal instruction) while idle")
    expect(last).to_contain_text(f"pid {beta['pid']}")
    expect(card.get_by_test_id("state")).to_have_text("ready", timeout=60_000)
    # the line stays once it is back: the operator sees what happened while away
    expect(last).to_contain_text("SIGILL")
    screenshot(console, "activity-last-exit")


def test_a_pin_the_engine_cannot_honour_shows_its_warning_until_unpinned(console: Page) -> None:
    console.goto("/#/models")
    row = console.locator("tr[data-model=weights]")
    expect(row).to_contain_text("alpha")
    row.get_by_test_id("pin").select_option("beta")
    expect(row).to_contain_text("pinned engine 'beta' cannot run gguf models")
    expect(console.get_by_test_id("model-warnings")).to_contain_text("weights")
    screenshot(console, "models")
    row.get_by_test_id("pin").select_option("")
    expect(row).not_to_contain_text("cannot run")
    expect(console.get_by_test_id("model-warnings")).to_be_empty()


def test_a_pull_shows_its_progress_and_the_machines_models_are_found_and_added(
    console: Page, hub: Hub
) -> None:
    release = hub.held.setdefault("smol-Q4_K_M.gguf", threading.Event())
    try:
        console.goto("/#/models")
        console.get_by_role("button", name="Pull from hub").click()
        form = console.get_by_test_id("pull-form")
        form.get_by_label("Model").fill("hf.co/acme/smol-GGUF")
        # the repo's vision projector is fetched only where asked (a model that reads images)
        expect(form.get_by_test_id("pull-mmproj")).not_to_be_checked()
        form.get_by_role("button", name="Pull").click()
        row = console.locator("tr[data-pull='hf.co/acme/smol-GGUF']")
        expect(row).to_contain_text("acme/smol-GGUF:Q4_K_M")
        # the hub holds the second half: the bar stands partway (1-99 %), as the feed said
        expect(row.locator(".pull-state")).to_have_text("downloading")
        expect(row).to_contain_text(re.compile(r"[1-9][\d.]* MiB of 93\.8 MiB \([1-9]\d?%\)"))
        console.get_by_role("button", name="Find on this machine").click()
        found = console.get_by_test_id("found-table")
        expect(found.locator("tr[data-found='smollm2:135m']")).to_contain_text("ollama")
        screenshot(console, "models-pull")
    finally:
        release.set()
        hub.held.pop("smol-Q4_K_M.gguf", None)
    expect(row.locator(".pull-state")).to_have_text("done", timeout=60_000)
    expect(console.locator("tr[data-model='acme/smol-GGUF:Q4_K_M']")).to_contain_text("gguf")
    memory = console.locator("tr[data-model='acme/smol-GGUF:Q4_K_M'] .model-memory")
    expect(memory).to_contain_text("at 8,192 tokens")
    found.locator("tr[data-found='smollm2:135m']").get_by_role("button", name="Add").click()
    expect(console.locator("tr[data-model='smollm2:135m']")).to_contain_text("gguf")
    expect(found.locator("tr[data-found='smollm2:135m']")).to_contain_text(
        "in the catalogue as smollm2:135m"
    )
    # the pulled file is where the hub's cache keeps it, and known as the entry made of it
    expect(found.locator("tr[data-found='acme/smol-GGUF:Q4_K_M']")).to_contain_text(
        "in the catalogue as acme/smol-GGUF:Q4_K_M"
    )


def add_fake_model(console: Page, model_id: str, **fields: str) -> Locator:
    """Add a fake model pinned to alpha from the Models page, the form's other fields
    filled by label; its row."""
    console.goto("/#/models")
    console.get_by_role("button", name="Add model").click()
    form = console.get_by_test_id("model-form")
    form.get_by_label("ID", exact=True).fill(model_id)
    form.get_by_label("Format").select_option("fake")
    form.get_by_label("Pinned to").select_option("alpha")
    for label, value in fields.items():
        form.get_by_label(label).fill(value)
    form.get_by_role("button", name="Add").click()
    return console.locator(f"tr[data-model={model_id}]")


def test_a_model_added_in_the_console_loads_in_view_then_unloads_and_goes(console: Page) -> None:
    options = '{"load_seconds": 3, "output_tokens": 4}'
    row = add_fake_model(console, "added", **{"Options (JSON)": options})
    expect(row).to_contain_text("not loaded")
    row.get_by_role("button", name="Load", exact=True).click()
    # the load runs on the engine; the page shows its progress as the feed brings it
    expect(row).to_contain_text("loading on alpha")
    expect(row).to_contain_text("loaded on alpha")
    row.get_by_role("button", name="Unload").click()
    expect(row).to_contain_text("not loaded")
    row.get_by_role("button", name="Remove").click()
    row.get_by_role("button", name="Really remove?").click()
    expect(row).to_have_count(0)


def test_a_model_with_a_keep_alive_shows_when_it_unloads_then_unloads(console: Page) -> None:
    row = add_fake_model(console, "brief", **{"Unload after idle (s)": "4"})
    row.get_by_role("button", name="Load", exact=True).click()
    # idle from its load: the front's schedule names the time, then the unload comes
    expect(row).to_contain_text(re.compile(r"loaded on alpha · unloads \S"))
    expect(row).to_contain_text("not loaded")
    row.get_by_role("button", name="Remove").click()
    row.get_by_role("button", name="Really remove?").click()
    expect(row).to_have_count(0)


def test_a_new_api_key_is_shown_once_works_and_its_usage_appears(
    console: Page, srv: Server
) -> None:
    console.goto("/#/keys")
    form = console.get_by_test_id("key-form")
    form.get_by_label("Name").fill("ci-client")
    form.get_by_label("chat").check()
    form.get_by_label("Tokens a day").fill("100000")
    form.get_by_role("button", name="Create key").click()
    secret = console.get_by_test_id("secret-value")
    expect(secret).to_have_value(re.compile(r"\S{20,}"))
    key = secret.input_value()
    keys = console.get_by_test_id("keys-table")
    expect(keys.locator("tr[data-key=ci-client]")).to_contain_text("active")
    # the table shows a prefix of the key, never the key itself
    expect(keys).not_to_contain_text(key)

    reply = client(srv, key).chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "usage"}]
    )
    assert reply.choices[0].message.content == expected_chat("usage", REPLY_TOKENS)
    assert reply.usage is not None
    row = console.locator("[data-testid=usage-table] tr[data-key=ci-client][data-model=chat]")
    cells = row.locator("td")
    expect(cells.nth(3)).to_have_text("1")
    expect(cells.nth(4)).to_have_text(str(reply.usage.prompt_tokens))
    expect(cells.nth(5)).to_have_text(str(reply.usage.completion_tokens))
    made = keys.locator("tr[data-key=ci-client] td")
    expect(made.nth(7)).not_to_have_text("—")  # last used
    spent = f"{reply.usage.total_tokens} of 100,000 today"
    expect(made.nth(4)).to_have_text(spent)  # the budget
    screenshot(console, "keys")


def ask_in_playground(console: Page, message: str, key: str | None = None) -> Locator:
    """Send a message to the model "chat" from the Playground; the reply's bubble."""
    console.goto("/#/playground")
    console.get_by_label("Model").select_option("chat")
    if key is not None:
        console.get_by_label("API key").fill(key)
    console.locator("textarea[name=message]").fill(message)
    console.get_by_role("button", name="Send").click()
    return console.locator(".bubble[data-role=assistant]").last


def test_the_playground_streams_a_reply_with_the_session(console: Page) -> None:
    reply = ask_in_playground(console, "hello")
    # the reply is seen arriving (40 tokens a second), then whole
    expect(reply).to_have_class(re.compile(r"\bstreaming\b"))
    expect(reply.locator(".text")).to_have_text(expected_chat("hello", REPLY_TOKENS))
    expect(reply).not_to_have_class(re.compile(r"\bstreaming\b"))
    expect(reply.get_by_test_id("reply-stats")).to_contain_text(f"{REPLY_TOKENS} tokens")
    screenshot(console, "playground")


def test_the_playground_says_why_a_wrong_key_is_refused(console: Page) -> None:
    alert = ask_in_playground(console, "hello", key="not-a-key").get_by_role("alert")
    expect(alert).to_contain_text("401")
    expect(alert).to_contain_text("Check the API key")


def test_a_live_setting_applies_to_the_next_request(console: Page, srv: Server) -> None:
    console.goto("/#/settings")
    row = console.locator("[data-setting='server.default_engine']")
    expect(row).to_contain_text("live")
    try:
        row.locator("select").select_option("beta")
        console.get_by_role("button", name="Save").click()
        expect(console.get_by_role("status")).to_contain_text("Applied now: server.default_engine")
        screenshot(console, "settings")
        stats = ask_in_playground(console, "which engine?").get_by_test_id("reply-stats")
        expect(stats).to_contain_text("engine beta")
    finally:
        httpx.patch(srv.url + "/admin/api/settings", headers=ADMIN,
                    json={"server.default_engine": None}, timeout=30)  # fmt: skip


def test_the_log_page_follows_an_engine_as_it_writes(console: Page, srv: Server) -> None:
    console.goto("/#/logs")
    console.get_by_test_id("log-source").select_option("beta")
    log = console.get_by_test_id("log")
    expect(log).to_contain_text("engine beta joined the bus")
    unloads = log.locator(".line", has_text="instances of chat (")
    before = unloads.count()
    answer = httpx.post(srv.url + "/admin/api/engines/beta/unload", headers=ADMIN,
                        json={"model": "chat"}, timeout=30)  # fmt: skip
    assert answer.status_code == 202, answer.text
    expect(unloads).to_have_count(before + 1)
    screenshot(console, "logs")
