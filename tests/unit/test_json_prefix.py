import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.json_prefix import is_json_prefix

DOCUMENT = '{"a": [1, -2.5e3, true, null], "b\\u00e9": {"c": "x\\"y"}, "d": []}'


def test_every_beginning_of_a_document_is_a_prefix() -> None:
    for end in range(len(DOCUMENT) + 1):
        assert is_json_prefix(DOCUMENT[:end]), DOCUMENT[:end]


@pytest.mark.parametrize(
    "text", ['{"a" 1', '{"a": tru3', "[1,,2]", '{"a": 1}}', "{1: 2}", '["\\x"]', "[01]", "{'a': 1}"]
)
def test_text_no_ending_can_make_json_is_not(text: str) -> None:
    assert not is_json_prefix(text)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
)


@given(JSON, st.integers(0, 10_000))
def test_any_cut_of_any_document_is_a_prefix(value: object, cut: int) -> None:
    text = json.dumps(value)
    assert is_json_prefix(text[: cut % (len(text) + 1)])
