"""The catalogue as the front serves it: names, formats read from the files, the owner
engine of each model, and the warnings about files that cannot be used and pins that cannot
be honoured."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import cast

from coderai.catalogue.entries import Catalogue, ModelEntry, draft_of
from coderai.catalogue.file_format import required_capability
from coderai.errors import ModelFileError, ModelNotFound
from coderai.front.dispatch.placement import Assignment, EngineAbility, ModelView, assign_owners
from coderai.front.dispatch.probe import Probed, probe, same
from coderai.front.dispatch.registry import EngineRecord, RemoteEngine
from coderai.front.engines.plan import EnginePlan

log = logging.getLogger("coderai.front")


def route_key(entry: ModelEntry) -> str:
    """What ownership keys on: the alias, else the file, else the id."""
    return entry.alias or entry.path or entry.id


class ModelDirectory:
    """Serves lookups from the results of the catalogue's file checks (see probe), so no
    request and no admin read touches a file on the event loop."""

    def __init__(
        self,
        catalogue: Catalogue,
        probed: Mapping[str, Probed],
        plans: list[EnginePlan],
        default_engine: str | None = None,
    ) -> None:
        self.plans = plans
        self.default_engine = default_engine
        self.catalogue = catalogue
        self._probed: dict[str, Probed] = {}
        #: engines on other machines now on the bus, by name
        self.remote: dict[str, RemoteEngine] = {}
        #: the models nodes on the bus offer from their own catalogues, by id and alias
        #: (pinned to the node; a name this catalogue has stays this catalogue's)
        self.offered: dict[str, ModelEntry] = {}
        #: offers already logged as left out
        self._told: set[tuple[str, str]] = set()
        self.assignment = Assignment()
        self.load(catalogue, probed)

    def load(self, catalogue: Catalogue, probed: Mapping[str, Probed]) -> Assignment:
        """Adopt a catalogue and the checks of its files: assign owners, and report the
        files that cannot be used and the pins that cannot be honoured."""
        self.catalogue = catalogue
        self._probed = {e.id: probed[e.id] for e in catalogue.entries}
        self.offered, taken = offered_entries(catalogue, self.remote)
        for node, model in taken - self._told:  # once each: offers are placed at every join
            log.warning("model %s offered by node %s: the name is taken; not listed", model, node)
        self._told |= taken
        views = [
            ModelView(
                e.id,
                route_key(e),
                self._capability_or_none(e),
                e.engine,
                e.replicas or 1,
                tuple(e.engines) if e.engines is not None else None,
            )
            for e in catalogue.entries
        ]
        engines = [EngineAbility(p.name, frozenset(p.capabilities)) for p in self.plans]
        planned = {p.name for p in self.plans}
        engines += [
            EngineAbility(n, r.capabilities) for n, r in self.remote.items() if n not in planned
        ]
        assignment = assign_owners(views, engines, self.default_engine)
        for model_id, result in self._probed.items():
            if isinstance(result, ModelFileError):  # such a model has no owner, no pin warning
                assignment.warnings[model_id] = result.message
        for model_id, warning in assignment.warnings.items():
            log.warning("model %s: %s", model_id, warning)
        self.assignment = assignment
        return assignment

    def set_remote_engines(self, remote: dict[str, RemoteEngine]) -> None:
        """Engines on other machines joined or left: owners are assigned again (a pin to
        one is honoured while it is on the bus), and the models nodes offer are listed
        while their node is on the bus."""
        if remote != self.remote:
            self.remote = dict(remote)
            self.load(self.catalogue, self._probed)

    def entries(self) -> list[ModelEntry]:
        """Every model a client may ask for: the catalogue's, then the nodes'."""
        by_id = {e.id: e for e in self.offered.values()}  # an alias maps to its entry too
        return [*self.catalogue.entries, *by_id.values()]

    def is_offered(self, entry: ModelEntry) -> bool:
        """An entry this catalogue does not hold: a node's offer (perhaps one withdrawn
        since the request took it, whose answer is then the node's absence)."""
        return entry.id not in self._probed

    def set_default_engine(self, name: str | None) -> None:
        """A new server.default_engine: owners are assigned again, so the next request
        for a model that no pin holds goes to it."""
        self.default_engine = name
        self.load(self.catalogue, self._probed)

    def entry(self, name: str) -> ModelEntry:
        entry = self.catalogue.resolve(name) or self.offered.get(name)
        if entry is None:
            raise ModelNotFound(f"The model {name!r} does not exist", param="model")
        return entry

    async def resolve(self, name: str) -> ModelEntry:
        """The entry a request names. If its file failed its last check, the file is
        checked again (off the loop): it may have been created or fixed since."""
        entry = self.entry(name)
        if self.is_offered(entry) or not isinstance(self._probed[entry.id], ModelFileError):
            return entry
        catalogue = self.catalogue
        result = (await probe([entry]))[entry.id]
        # adopt a changed outcome, unless a catalogue saved meanwhile brought its own checks
        if self.catalogue is catalogue and not same(self._probed[entry.id], result):
            self.load(catalogue, {**self._probed, entry.id: result})
        if isinstance(result, ModelFileError):
            raise result
        return self.entry(name)

    def format_of(self, entry: ModelEntry) -> str:
        """The entry's stated format, else the one its file showed when checked."""
        if self.is_offered(entry):
            return entry.format or "gguf"  # a node states the format of what it offers
        result = self._probed[entry.id]
        if isinstance(result, ModelFileError):
            # the stored error is raised for every such request: each raise would add its
            # frames (and the request in them) to one ever-growing traceback
            raise result.with_traceback(None)
        return result

    def spec_of(self, entry: ModelEntry) -> dict[str, object]:
        """What an engine needs to load the entry (sent in each JOB and in preloads); a
        draft model it names is sent as its file too (the catalogue checked it is listed)."""
        spec = entry.spec(self.format_of(entry), self.catalogue.templates.get(entry.id))
        draft = draft_of(entry)
        found = self.catalogue.resolve(draft) if draft is not None else None
        if found is not None:
            options = cast(dict[str, object], spec["options"])
            spec["options"] = {**options, "speculative": {"draft": draft, "path": found.path}}
        return spec

    def capability_of(self, entry: ModelEntry) -> str:
        return required_capability(self.format_of(entry), entry.options)

    def _capability_or_none(self, entry: ModelEntry) -> str | None:
        try:
            return self.capability_of(entry)
        except ModelFileError:
            return None

    def keep_alive_of(self, model_id: str, default: float) -> float:
        """Seconds a resident model may stay idle (-1: never): its entry's keep_alive, else
        the default; never for one kept loaded. A node's own models are its own front's to
        unload."""
        entry = self.catalogue.resolve(model_id)
        if entry is None:
            return default if model_id not in self.offered else -1.0
        if entry.keep_loaded:
            return -1.0
        return entry.keep_alive if entry.keep_alive is not None else default

    def kept_loaded(self, model_id: str) -> bool:
        """Whether the catalogue keeps this model loaded (never unloaded for room)."""
        entry = self.catalogue.resolve(model_id)
        return entry is not None and entry.keep_loaded

    def owner_of(self, entry: ModelEntry) -> str | None:
        if self.is_offered(entry):
            return entry.engine  # the node that offers it
        return self.assignment.owners.get(route_key(entry))

    def replicas_of(self, entry: ModelEntry) -> tuple[str, ...]:
        """The engines of a model with replicas, its owner first; () for one that has
        one owner."""
        if self.is_offered(entry):
            return ()
        return self.assignment.replicas.get(route_key(entry), ())

    def describe(self) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        for entry in self.catalogue.entries:
            result = self._probed[entry.id]
            out.append(
                {
                    "id": entry.id,
                    "alias": entry.alias,
                    "path": entry.path,
                    "format": None if isinstance(result, ModelFileError) else result,
                    "pin": entry.engine,
                    "owner": self.owner_of(entry),
                    "replicas": list(self.replicas_of(entry)),
                    "load_mode": entry.load_mode,
                    "keep_alive": entry.keep_alive,
                    "keep_loaded": entry.keep_loaded,
                    "options": entry.options,
                    "warning": self.assignment.warnings.get(entry.id),
                    "offered_by": None,
                }
            )
        for entry in self.entries()[len(self.catalogue.entries) :]:
            out.append(
                {"id": entry.id, "alias": entry.alias, "path": "", "format": entry.format,
                 "pin": entry.engine, "owner": entry.engine, "replicas": [],
                 "load_mode": "on-request",
                 "keep_alive": None, "keep_loaded": False, "options": {}, "warning": None,
                 "offered_by": entry.engine}
            )  # fmt: skip
        return out

    def preloads_for(self, engine: EngineRecord) -> list[ModelEntry]:
        """Entries with load_mode "load" that this newly joined engine owns, or holds a
        replica of."""
        return [
            e
            for e in self.catalogue.entries
            if e.load_mode == "load"
            and (self.owner_of(e) == engine.name or engine.name in self.replicas_of(e))
        ]


def offered_entries(
    catalogue: Catalogue, remote: dict[str, RemoteEngine]
) -> tuple[dict[str, ModelEntry], set[tuple[str, str]]]:
    """The models nodes offer, by id and alias, each pinned to its node; and the (node,
    model) offers left out because the name is taken: a name the catalogue has, or a node
    that joined earlier offers (`remote` is in the order the nodes joined)."""
    out: dict[str, ModelEntry] = {}
    taken: set[tuple[str, str]] = set()
    for node, engine in remote.items():
        for model in engine.offered:
            names = [n for n in (model.id, model.alias) if n]
            if any(catalogue.resolve(n) is not None or n in out for n in names):
                taken.add((node, model.id))
                continue
            entry = ModelEntry(id=model.id, alias=model.alias, engine=node, format=model.format)
            for name in names:
                out[name] = entry
    return out, taken
