"""The catalogue as the front serves it: names, formats read from the files, and which
models an engine should load as soon as it joins."""

from __future__ import annotations

import logging

from coderai.config import Catalogue, ModelEntry
from coderai.errors import CoderaiError, ModelNotFound
from coderai.front.placement import choose_engine
from coderai.front.registry import EngineRecord
from coderai.modelfile import detect_format, required_capability

log = logging.getLogger("coderai.front")


class ModelDirectory:
    def __init__(self, catalogue: Catalogue, default_engine: str | None = None) -> None:
        self.catalogue = catalogue
        self.default_engine = default_engine
        self._formats: dict[str, str] = {}
        #: model id -> name of the engine asked to preload it
        self._preloaded: dict[str, str] = {}

    def entry(self, name: str) -> ModelEntry:
        entry = self.catalogue.resolve(name)
        if entry is None:
            raise ModelNotFound(f"The model {name!r} does not exist", param="model")
        return entry

    def format_of(self, entry: ModelEntry) -> str:
        """The entry's stated format, else the one its file shows (read once)."""
        if entry.format is not None:
            return entry.format
        fmt = self._formats.get(entry.id)
        if fmt is None:
            fmt = self._formats[entry.id] = detect_format(entry.path)
        return fmt

    def capability_of(self, entry: ModelEntry) -> str:
        return required_capability(self.format_of(entry), entry.options)

    def preloads_for(self, engine: EngineRecord, engines: list[EngineRecord]) -> list[ModelEntry]:
        """Entries with load_mode "load" that placement gives to this newly joined engine
        and that no other live engine was already asked to load."""
        live = {e.name for e in engines}
        chosen = []
        for entry in self.catalogue.entries:
            if entry.load_mode != "load":
                continue
            asked = self._preloaded.get(entry.id)
            if asked is not None and asked != engine.name and asked in live:
                continue
            try:
                capability = self.capability_of(entry)
            except CoderaiError as exc:
                log.error("cannot preload %s: %s", entry.id, exc.message)
                continue
            target = choose_engine(capability, entry.id, entry.engine, self.default_engine, engines)
            if target is engine:
                self._preloaded[entry.id] = engine.name
                chosen.append(entry)
        return chosen
