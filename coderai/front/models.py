"""The catalogue as the front serves it: names, formats read from the files, the owner
engine of each model, and the warnings about pins that cannot be honoured."""

from __future__ import annotations

import logging

from coderai.config import Catalogue, ModelEntry
from coderai.errors import CoderaiError, ModelNotFound
from coderai.front.engine_plan import EnginePlan
from coderai.front.placement import Assignment, EngineView, ModelView, assign_owners
from coderai.front.registry import EngineRecord
from coderai.modelfile import detect_format, required_capability

log = logging.getLogger("coderai.front")


def route_key(entry: ModelEntry) -> str:
    """What ownership keys on: the alias, else the file, else the id."""
    return entry.alias or entry.path or entry.id


class ModelDirectory:
    def __init__(
        self,
        catalogue: Catalogue,
        plans: list[EnginePlan],
        default_engine: str | None = None,
    ) -> None:
        self.plans = plans
        self.default_engine = default_engine
        self._formats: dict[str, str] = {}
        self.catalogue = catalogue
        self.assignment = Assignment()
        self.load(catalogue)

    def load(self, catalogue: Catalogue) -> Assignment:
        """Adopt a catalogue: assign owners and report pins that cannot be honoured."""
        self.catalogue = catalogue
        self._formats = {}
        views = [
            ModelView(e.id, route_key(e), self._capability_or_none(e), e.engine)
            for e in catalogue.entries
        ]
        engines = [EngineView(p.name, frozenset(p.capabilities)) for p in self.plans]
        self.assignment = assign_owners(views, engines, self.default_engine)
        for model_id, warning in self.assignment.warnings.items():
            log.warning("model %s: %s", model_id, warning)
        return self.assignment

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

    def spec_of(self, entry: ModelEntry) -> dict[str, object]:
        """What an engine needs to load the entry (sent in each JOB and in preloads)."""
        return entry.spec(self.format_of(entry))

    def capability_of(self, entry: ModelEntry) -> str:
        return required_capability(self.format_of(entry), entry.options)

    def _capability_or_none(self, entry: ModelEntry) -> str | None:
        try:
            return self.capability_of(entry)
        except CoderaiError as exc:
            self.assignment.warnings[entry.id] = exc.message
            log.warning("model %s: %s", entry.id, exc.message)
            return None

    def owner_of(self, entry: ModelEntry) -> str | None:
        return self.assignment.owners.get(route_key(entry))

    def describe(self) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        for entry in self.catalogue.entries:
            try:
                fmt: str | None = self.format_of(entry)
            except CoderaiError:
                fmt = None
            out.append(
                {
                    "id": entry.id,
                    "alias": entry.alias,
                    "path": entry.path,
                    "format": fmt,
                    "pin": entry.engine,
                    "owner": self.owner_of(entry),
                    "load_mode": entry.load_mode,
                    "warning": self.assignment.warnings.get(entry.id),
                }
            )
        return out

    def preloads_for(self, engine: EngineRecord) -> list[ModelEntry]:
        """Entries with load_mode "load" that this newly joined engine owns."""
        return [
            e
            for e in self.catalogue.entries
            if e.load_mode == "load" and self.owner_of(e) == engine.name
        ]
