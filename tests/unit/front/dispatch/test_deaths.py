"""An engine's death in words: what it was doing for a request, and why engines that could
serve a request are not running."""

from __future__ import annotations

from coderai.front.dispatch.deaths import Death, asked_to_load, down, engine_doing, job_doing
from coderai.front.engines.host import EngineStatus

SIGILL = "died of SIGILL (illegal instruction)"


def test_a_job_is_generating_once_its_first_token_came() -> None:
    assert job_doing("qwen", True, 600, True) == "generating for model 'qwen'"


def test_a_job_admitted_or_on_a_loaded_model_was_reading_its_prompt() -> None:
    assert job_doing("qwen", False, 612, False) == (
        "reading this prompt (612 tokens) for model 'qwen'"
    )
    assert job_doing("qwen", False, None, True) == "reading this prompt for model 'qwen'"


def test_a_job_whose_model_was_not_loaded_there_waited_for_its_load() -> None:
    assert job_doing("qwen", False, None, False) == "loading model 'qwen'"


def test_an_engine_was_doing_what_it_did_for_its_first_job_or_its_load() -> None:
    prompt = job_doing("qwen", False, 612, True)
    assert engine_doing([prompt], []) == "reading a prompt (612 tokens) for model 'qwen'"
    assert engine_doing([], ["gemma"]) == "loading model 'gemma'"
    assert engine_doing([], []).startswith("idle")


def test_a_death_is_one_sentence() -> None:
    death = Death("engine-0", 77, SIGILL, "loading model 'qwen'")
    assert death.sentence() == f"engine engine-0 {SIGILL} while loading model 'qwen'"
    assert death.public()["message"] == death.sentence()


def test_an_engine_down_says_what_its_supervisor_does_next() -> None:
    death = Death("engine-0", 77, SIGILL, "loading model 'qwen'")
    backoff = EngineStatus(state="backoff", failures=4, retry_at=108.0)
    said = down([death], {"engine-0": backoff}, now=100.0)
    assert said == (
        f"engine engine-0 {SIGILL} while loading model 'qwen'; it failed 4 times in a row"
        " at start; next try in 8 s"
    )
    restarting = EngineStatus(state="restarting", failures=1)
    assert down([death], {"engine-0": restarting}, 0.0).endswith("it is being restarted")


def test_a_load_asked_stays_until_a_heartbeat_shows_it_or_two_intervals_pass() -> None:
    asked = {"qwen": 10.0, "gemma": 10.0, "smol": 10.0}
    # gemma shows as loading and smol as loaded: the heartbeat reports them from now on
    left = asked_to_load(asked, ["smol"], {"gemma": 0.1}, now=10.5, interval=1.0)
    assert left == {"qwen": 10.0}  # a heartbeat sent before the engine read the ask
    # not shown two intervals after it was asked: refused or failed, never "loading"
    assert asked_to_load(left, [], {}, now=12.0, interval=1.0) == {}
