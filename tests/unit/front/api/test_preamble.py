"""What a stream sends before its first output (stream_io.Preamble), and the PROMPT
message's check: pure logic over jobs, no server."""

from __future__ import annotations

import pytest

from coderai.bus.messages import Done, Prompt
from coderai.errors import BusProtocolError
from coderai.front.api.stream_io import Preamble, progress_comment
from tests.support.bus import job

#: an interval no test reaches: keep-alives come only from progress
LONG = 3600.0


def preamble(interval: float = LONG) -> Preamble:
    return Preamble(lambda p: b"<open %d>" % (p.tokens if p else -1), progress_comment, interval)


def test_the_first_call_always_sends_something_to_carry_the_headers() -> None:
    waiting = job(1)
    first = preamble().events([waiting])
    assert first == b": waiting for the model\n\n"


def test_the_opening_comes_once_the_prompt_is_admitted_with_its_count() -> None:
    j, p = job(1), preamble()
    j.prompted("e", Prompt(1, tokens=100))
    assert p.events([j]) == b"<open 100>"
    assert j.served_by == "e"  # the engine that admitted it names the stream
    assert p.events([j]) == b""  # nothing new: nothing sent (the interval is far)
    j.prompted("e", Prompt(1, tokens=100, read=50, cached=10))
    assert p.events([j]) == b": prompt 50/100 tokens read, 10 cached\n\n"


def test_a_keepalive_is_due_each_interval_without_progress() -> None:
    j, p = job(1), preamble(interval=0.0)
    j.prompted("e", Prompt(1, tokens=10))
    p.events([j])
    assert p.events([j]) == b": prompt 0/10 tokens read, 0 cached\n\n"


def test_output_first_opens_and_ends_the_preamble() -> None:
    j, p = job(1), preamble()
    p.events([j])  # a keep-alive while it waited
    j.push("e", "hi")
    assert p.events([j]) == b"<open -1>"
    j.prompted("e", Prompt(1, tokens=10, read=10))
    assert p.events([j]) == b""


def test_an_end_before_any_output_still_opens() -> None:
    j, p = job(1), preamble()
    j.finish(Done(1, "stop", 3, 0))
    assert p.events([j]) == b"<open -1>"


def test_any_choices_prompt_opens_a_stream_of_several() -> None:
    a, b, p = job(1), job(2), preamble()
    b.prompted("e", Prompt(2, tokens=7))
    assert p.events([a, b]) == b"<open 7>"


@pytest.mark.parametrize(
    "prompt",
    [Prompt(1, tokens=10, read=11), Prompt(1, tokens=10, cached=11), Prompt(1, tokens=-1),
     Prompt(1, tokens=1.5), Prompt(1, tokens=True), Prompt(-1, tokens=1)],  # type: ignore[arg-type]
)  # fmt: skip
def test_a_prompt_message_with_counts_a_client_cannot_be_shown_is_refused(
    prompt: Prompt,
) -> None:
    with pytest.raises(BusProtocolError):
        prompt.check()
