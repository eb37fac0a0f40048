from __future__ import annotations

from coderai.engine.decoding.stops import StopMatcher


def feed_all(matcher: StopMatcher, tokens: list[str]) -> tuple[str, bool]:
    out = ""
    for token in tokens:
        text, stopped = matcher.feed(token)
        out += text
        if stopped:
            return out, True
    return out + matcher.flush(), False


def test_no_stops_pass_text_through() -> None:
    assert feed_all(StopMatcher([]), ["a", "b"]) == ("ab", False)


def test_stop_inside_one_token_cuts_before_it() -> None:
    assert feed_all(StopMatcher(["END"]), ["hello END world"]) == ("hello ", True)


def test_stop_split_across_tokens_is_found() -> None:
    assert feed_all(StopMatcher(["<|end|>"]), ["hi <|", "en", "d|> more"]) == ("hi ", True)


def test_a_partial_match_is_held_then_released() -> None:
    matcher = StopMatcher(["STOP"])
    assert matcher.feed("go ST") == ("go ", False)
    assert matcher.feed("ART") == ("START", False)


def test_held_text_is_flushed_when_the_sequence_ends_otherwise() -> None:
    assert feed_all(StopMatcher(["xyz"]), ["abc x"]) == ("abc x", False)


def test_the_earliest_of_several_stops_wins() -> None:
    assert feed_all(StopMatcher(["b", "a"]), ["xxaxb"]) == ("xx", True)


def test_empty_stop_strings_are_ignored() -> None:
    assert feed_all(StopMatcher([""]), ["abc"]) == ("abc", False)


def test_the_stop_that_matched_first_is_named() -> None:
    matcher = StopMatcher(["zz", "b"])
    assert feed_all(matcher, ["a", "bzz"]) == ("a", True)
    assert matcher.matched == "b"
    assert StopMatcher(["x"]).matched == ""
