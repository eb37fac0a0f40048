from __future__ import annotations

from collections.abc import Sequence

from coderai.engine.backends.transformers.detok import IncrementalDetokenizer

# a byte-level vocabulary: each token is some bytes; text exists only for whole characters
VOCAB = {0: b"Hel", 1: b"lo ", 2: "東".encode()[:2], 3: "東".encode()[2:], 4: b"!", 5: b"\xe2"}


def decode(ids: Sequence[int]) -> str:
    return b"".join(VOCAB[i] for i in ids).decode("utf-8", errors="replace")


def test_text_arrives_whole_across_split_characters() -> None:
    detok = IncrementalDetokenizer(decode)
    pieces = [detok.add(i) for i in (0, 1, 2, 3, 4)]
    assert pieces == ["Hel", "lo ", "", "東", "!"]
    assert "".join(pieces) == decode([0, 1, 2, 3, 4])


def test_a_dangling_partial_character_is_held() -> None:
    detok = IncrementalDetokenizer(decode)
    assert detok.add(0) == "Hel"
    assert detok.add(5) == ""


def test_long_streams_match_whole_decoding() -> None:
    ids = [0, 1, 2, 3, 4] * 20
    detok = IncrementalDetokenizer(decode)
    assert "".join(detok.add(i) for i in ids) == decode(ids)
