"""How many recent log lines a request asks for (`?lines=`), read from a real request
(the routes are tested in tests/integration)."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from aiohttp.test_utils import make_mocked_request

from coderai.errors import InvalidRequest
from coderai.front.console.logs_api import _count


def count(query: str) -> int | None:
    return _count(make_mocked_request("GET", "/admin/api/logs" + query))


def test_without_lines_every_kept_line_is_asked_for() -> None:
    assert count("") is None
    assert count("?source=front") is None


def test_a_whole_number_is_the_count_and_zero_is_allowed() -> None:
    assert count("?lines=25") == 25
    assert count("?lines=0") == 0
    assert count("?source=engine-0&lines=1") == 1


@pytest.mark.parametrize("raw", ["-1", "abc", "", "2.5", "1e3"])
def test_a_negative_or_non_whole_count_is_refused_naming_it(raw: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        count("?lines=" + quote(raw))
    assert refused.value.param == "lines"
    assert refused.value.status == 400
    assert f"(got {raw!r})" in refused.value.message
