"""Which catalogue entry an admin edit names (admin_api._find): its id, exactly (the
routes are tested in tests/integration/front/console)."""

from __future__ import annotations

import pytest

from coderai.catalogue.entries import ModelEntry
from coderai.errors import NotFound
from coderai.front.console.admin_api import _find

ENTRIES = [
    ModelEntry(id="small", format="fake"),
    ModelEntry(id="big", alias="large", format="fake"),
    ModelEntry(id="Small-v2", format="fake"),
]


def test_the_entry_with_the_id_is_found_itself() -> None:
    assert _find(ENTRIES, "big") is ENTRIES[1]  # the edits replace it by identity
    assert _find(ENTRIES, "Small-v2") is ENTRIES[2]
    assert _find(ENTRIES, "small") is ENTRIES[0]


@pytest.mark.parametrize("name", ["large", "SMALL", "smal", "small ", ""])
def test_an_alias_or_a_near_miss_finds_nothing(name: str) -> None:
    with pytest.raises(NotFound) as missing:
        _find(ENTRIES, name)
    assert missing.value.status == 404
    assert f"no model with id {name!r}" in missing.value.message


def test_nothing_is_found_in_an_empty_catalogue() -> None:
    with pytest.raises(NotFound):
        _find([], "small")
