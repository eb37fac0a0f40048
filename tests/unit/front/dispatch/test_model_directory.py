from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from coderai.catalogue.entries import Catalogue, ModelEntry
from coderai.errors import ConfigError, ModelFileError
from coderai.front.dispatch.catalogue import ModelDirectory
from coderai.front.dispatch.probe import probe
from coderai.front.engines.plan import EnginePlan

PLANS = [EnginePlan("cpu0", "cpu", ("gguf", "fake"), 2)]


def directory_for(entries: list[ModelEntry]) -> ModelDirectory:
    catalogue = Catalogue(entries)
    return ModelDirectory(catalogue, asyncio.run(probe(entries)), PLANS)


def test_a_missing_file_is_that_models_warning_beside_the_pin_warnings(tmp_path: Path) -> None:
    absent = str(tmp_path / "absent.gguf")
    entries = [
        ModelEntry(id="gone", path=absent),
        ModelEntry(id="ghost", format="fake", engine="gamma"),
    ]
    described = {m["id"]: m for m in directory_for(entries).describe()}
    assert f"cannot open model file {absent}" in str(described["gone"]["warning"])
    assert (described["gone"]["format"], described["gone"]["owner"]) == (None, None)
    assert "'gamma' does not exist" in str(described["ghost"]["warning"])


def test_a_model_whose_file_failed_its_check_is_answered_with_that_error(
    tmp_path: Path,
) -> None:
    directory = directory_for([ModelEntry(id="gone", path=str(tmp_path / "absent.gguf"))])
    with pytest.raises(ModelFileError, match=r"absent\.gguf"):
        asyncio.run(directory.resolve("gone"))
    with pytest.raises(ModelFileError, match=r"absent\.gguf"):
        directory.spec_of(directory.entry("gone"))


def test_a_file_created_after_its_check_is_adopted_at_the_next_request(tmp_path: Path) -> None:
    weights = tmp_path / "late.gguf"
    directory = directory_for([ModelEntry(id="late", path=str(weights))])
    weights.write_bytes(b"GGUF\x03\x00\x00\x00")
    entry = asyncio.run(directory.resolve("late"))
    assert directory.spec_of(entry)["format"] == "gguf"
    (described,) = directory.describe()
    assert (described["warning"], described["owner"]) == (None, "cpu0")


def test_a_file_that_changes_how_it_fails_updates_its_warning(tmp_path: Path) -> None:
    weights = tmp_path / "bad.gguf"
    directory = directory_for([ModelEntry(id="bad", path=str(weights))])
    weights.write_bytes(b"PK\x03\x04")
    with pytest.raises(ModelFileError, match="neither GGUF"):
        asyncio.run(directory.resolve("bad"))
    assert "neither GGUF" in str(directory.describe()[0]["warning"])


def test_models_a_node_offers_are_listed_pinned_to_it_while_it_is_on_the_bus() -> None:
    from coderai.errors import ModelNotFound
    from coderai.front.dispatch.registry import Offered, RemoteEngine

    directory = directory_for([ModelEntry(id="mine", format="fake")])
    offers = (Offered("theirs", "gguf", "t"), Offered("mine", "fake", None))
    directory.set_remote_engines({"node-b": RemoteEngine(frozenset({"gguf"}), offers)})
    # a name this catalogue has stays this catalogue's; the rest are the node's
    assert [e.id for e in directory.entries()] == ["mine", "theirs"]
    theirs = asyncio.run(directory.resolve("t"))  # by its alias too
    assert directory.owner_of(theirs) == "node-b"
    assert directory.spec_of(theirs) == {"id": "theirs", "path": "", "format": "gguf",
                                         "options": {}}  # fmt: skip
    assert directory.owner_of(directory.entry("mine")) == "cpu0"
    assert [m["offered_by"] for m in directory.describe()] == [None, "node-b"]
    directory.set_remote_engines({})
    with pytest.raises(ModelNotFound):
        directory.entry("theirs")


def test_a_draft_model_is_sent_with_its_file_and_one_not_listed_is_refused(
    tmp_path: Path,
) -> None:
    """`speculative: {"draft": id}` names a catalogue entry: the engine gets its file (it
    may not read this catalogue), and a name no entry has is refused where the catalogue
    is read."""
    draft, main = tmp_path / "draft.gguf", tmp_path / "main.gguf"
    entries = [ModelEntry(id="small", path=str(draft), format="gguf"),
               ModelEntry(id="big", path=str(main), format="gguf",
                          options={"speculative": {"draft": "small"}})]  # fmt: skip
    spec = directory_for(entries).spec_of(entries[1])
    assert spec["options"] == {"speculative": {"draft": "small", "path": str(draft)}}
    with pytest.raises(ConfigError, match="its draft model 'tiny' is not listed"):
        Catalogue(
            [ModelEntry(id="big", path=str(main), options={"speculative": {"draft": "tiny"}})]
        )


def test_keep_alive_is_the_entrys_else_the_default_and_never_for_one_kept_loaded() -> None:
    directory = directory_for([
        ModelEntry(id="own", format="fake", alias="mine", keep_alive=30),
        ModelEntry(id="plain", format="fake"),
        ModelEntry(id="kept", format="fake", keep_alive=30, keep_loaded=True),
    ])  # fmt: skip
    assert directory.keep_alive_of("own", 300) == 30
    assert directory.keep_alive_of("plain", 300) == 300
    assert directory.keep_alive_of("kept", 300) == -1
    assert directory.keep_alive_of("unknown", 300) == 300
    assert directory.kept_loaded("kept") and not directory.kept_loaded("own")
    for bad in (-2, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="keep_alive"):
            ModelEntry(id="x", format="fake", keep_alive=bad)


def test_an_entry_names_its_engines_or_a_count_of_replicas_not_both() -> None:
    with pytest.raises(ValueError, match="not with replicas or engine"):
        ModelEntry(id="x", format="fake", engines=["a"], replicas=2)
    with pytest.raises(ValueError, match="twice"):
        ModelEntry(id="x", format="fake", engines=["a", "a"])
    replicated = directory_for([ModelEntry(id="r", format="fake", replicas=2)])
    # one engine: a replica set of one is no set, and it is said
    assert replicated.replicas_of(replicated.entry("r")) == ()
    assert replicated.describe()[0]["warning"] == "asks for 2 replicas; 1 engine can run it"
