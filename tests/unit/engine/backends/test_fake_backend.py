from __future__ import annotations

import threading
import time

import pytest

from coderai.bus.messages import Job, ModelSpec
from coderai.engine.backends.base import END, LoadProgress, Sequence
from coderai.engine.backends.fake import (
    FakeBackend,
    fake_embedding,
    fake_tokens,
    job_prompt,
    scripted,
)
from coderai.errors import JobError


def _job(prompt: str, seed: int | None = None) -> Job:
    return Job(1, {"id": "f", "format": "fake", "options": {}}, "completion", prompt, seed=seed)


def _spec(options: dict[str, object]) -> ModelSpec:
    return ModelSpec("f", "", "fake", options)


def test_text_is_a_pure_function_of_prompt_and_seed() -> None:
    assert fake_tokens("a", 0, 20) == fake_tokens("a", 0, 20)
    assert fake_tokens("a", 0, 20) != fake_tokens("b", 0, 20)
    assert fake_tokens("a", 0, 20) != fake_tokens("a", 1, 20)


def test_instance_steps_produce_fake_tokens_then_end() -> None:
    instance = FakeBackend().load(_spec({"output_tokens": 5}), LoadProgress())
    seq = Sequence(job=_job("hello", seed=3))
    instance.start(seq)
    produced = []
    while True:
        (result,) = instance.step([seq])
        if result is END:
            break
        assert isinstance(result, str)
        produced.append(result)
        seq.completion_tokens += 1
    assert produced == fake_tokens(job_prompt(seq.job), 3, 5)


def test_fail_after_tokens_fails_only_that_sequence() -> None:
    instance = FakeBackend().load(_spec({"fail_after_tokens": 0}), LoadProgress())
    seq = Sequence(job=_job("x"))
    instance.start(seq)
    (result,) = instance.step([seq])
    assert isinstance(result, JobError)


def test_load_reports_progress_while_it_runs() -> None:
    progress = LoadProgress()
    loader = threading.Thread(
        target=FakeBackend().load, args=(_spec({"load_seconds": 2.0}), progress)
    )
    loader.start()
    while progress.fraction == 0.0 and loader.is_alive():  # its first report
        time.sleep(0.001)
    midway, running = progress.fraction, loader.is_alive()
    loader.join()
    assert running and 0.0 < midway < 1.0
    assert progress.fraction == 1.0


@pytest.mark.parametrize("bad", [-1, "fast", True])
def test_bad_options_are_job_errors(bad: object) -> None:
    with pytest.raises(JobError, match="tokens_per_second"):
        FakeBackend().load(_spec({"tokens_per_second": bad}), LoadProgress())


def test_a_fake_models_memory_is_really_taken() -> None:
    import psutil

    from coderai.engine.backends.fake import FakeInstance

    process = psutil.Process()
    before = process.memory_info().rss
    instance = FakeInstance({"memory_mb": 64})
    grown = process.memory_info().rss - before
    assert grown >= 60 * (1 << 20), grown  # every page touched, not merely reserved
    assert instance.weights is not None and len(instance.weights) == 64 * (1 << 20)


def test_a_fake_load_lets_other_threads_run_while_it_takes_its_memory() -> None:
    # a real load reads its file in C without the GIL; the fake's must not hold it for the
    # whole allocation either, or the engine's heartbeat stops while it loads
    from coderai.engine.backends.fake import FakeInstance

    done = threading.Event()
    ticks = 0

    def tick() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            time.sleep(0.0005)

    ticker = threading.Thread(target=tick)
    ticker.start()
    time.sleep(0.01)
    started = ticks
    try:
        FakeInstance({"memory_mb": 512})  # 64 pieces
    finally:
        done.set()
        ticker.join()
    assert ticks - started >= 4, f"the other thread ran {ticks - started} times"


def test_token_chars_repeats_each_word_to_that_length() -> None:
    plain = fake_tokens("p", 0, 50)
    long = fake_tokens("p", 0, 50, token_chars=64)
    assert all(len(t) == 64 and t.startswith(w) for t, w in zip(long, plain, strict=True))


def test_embeddings_are_unit_vectors_of_the_inputs_bytes_and_only_when_asked_for() -> None:
    instance = FakeBackend().load(_spec({"embedding_dims": 12}), LoadProgress())
    vectors, tokens = instance.embed(["café", "dog"])
    assert tokens == len("café".encode()) + len(b"dog")
    assert all(len(v) == 12 and abs(sum(x * x for x in v) - 1) < 1e-9 for v in vectors)
    assert vectors[0] != vectors[1]
    # token ids are the bytes: the same vector as their text, every time
    assert instance.embed([list(b"dog")]) == ([vectors[1]], 3)
    assert fake_embedding(list(b"dog"), 12) == vectors[1]
    with pytest.raises(JobError, match="no tokens"):
        instance.embed([""])
    plain = FakeBackend().load(_spec({}), LoadProgress())
    with pytest.raises(JobError, match="does not produce embeddings"):
        plain.embed(["dog"])


def test_a_scripted_tool_loop_answers_turn_by_turn_with_the_tools_output() -> None:
    script = ['<tool_call>{"name": "f", "arguments": {}}</tool_call>', "It said: {tool_result}"]
    asked = [{"role": "user", "content": "go"}]
    assert scripted(script, asked) == script[0]
    called = [*asked, {"role": "assistant", "content": ""},
              {"role": "tool", "tool_call_id": "c", "content": " done \n"}]  # fmt: skip
    assert scripted(script, called) == "It said: done"
    # past the script's end, its last turn again
    assert scripted(script, [*called, *called[1:]]) == "It said: done"
