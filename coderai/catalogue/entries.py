"""The model catalogue (models.json): its entries validated with pydantic, and the models a
front serves, addressable by id or alias. The front reads and writes the file; engines are
sent each entry's spec with a job."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from coderai.catalogue import model_options
from coderai.catalogue.file_format import required_capability
from coderai.catalogue.templatefile import TEMPLATE_OPTION
from coderai.common.json_files import read_json
from coderai.common.validation import KeepAlive, Strict, file_problem
from coderai.errors import ConfigError

ModelFormat = Literal["fake", "gguf", "transformers"]


class ModelEntry(Strict):
    id: str = Field(min_length=1)
    path: str = ""
    alias: str | None = None
    #: pin: the engine name that must serve this model
    engine: str | None = None
    #: run on this many engines, each a whole copy (on its own engine, its own card);
    #: requests are routed between them (front/dispatch/replicas.py)
    replicas: int | None = Field(None, ge=1, le=64)
    #: or run on exactly these engines, by name
    engines: list[str] | None = Field(None, min_length=1)
    format: ModelFormat | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    #: "load" loads the model as soon as its engine starts; "on-request" at first use
    load_mode: Literal["on-request", "load"] = "on-request"
    #: seconds idle before it is unloaded (front/dispatch/idle.py); -1: never; None:
    #: models.keep_alive
    keep_alive: KeepAlive | None = None
    #: never unloaded for idleness nor to make room for another model (an operator's
    #: Unload still takes it)
    keep_loaded: bool = False

    @model_validator(mode="after")
    def _one_placement(self) -> ModelEntry:
        if self.engines is not None and (self.replicas is not None or self.engine is not None):
            raise ValueError("engines names every engine it runs on: not with replicas or engine")
        if self.engines is not None and len(set(self.engines)) != len(self.engines):
            raise ValueError("engines lists an engine twice")
        return self

    @model_validator(mode="after")
    def _format_known(self) -> ModelEntry:
        if self.format is None and not self.path:
            raise ValueError("an entry needs a path or an explicit format")
        # a format read from the file later is checked by the engine that loads it
        backend = required_capability(self.format, self.options) if self.format else None
        why = model_options.refusal(self.options, backend)
        if why is not None:
            raise ValueError(why)
        return self

    @field_validator("options")
    @classmethod
    def _chat_template_is_text(cls, options: dict[str, Any]) -> dict[str, Any]:
        template = options.get(TEMPLATE_OPTION)
        if TEMPLATE_OPTION in options and not (isinstance(template, str) and template.strip()):
            raise ValueError(
                f"{TEMPLATE_OPTION} must be a Jinja template or the path of a file holding one"
            )
        return options

    def names(self) -> tuple[str, ...]:
        """The names a client may request this model by."""
        return (self.id,) if self.alias in (None, self.id) else (self.id, self.alias or "")

    def spec(self, resolved_format: str, chat_template: str | None = None) -> dict[str, Any]:
        """What an engine needs to load the model (sent inside each JOB). Its
        chat_template option is sent as `chat_template`, the template's text: the engine
        may not see this machine's files."""
        options = self.options
        if chat_template is not None:
            options = {**options, TEMPLATE_OPTION: chat_template}
        spec: dict[str, Any] = {
            "id": self.id,
            "path": self.path,
            "format": resolved_format,
            "options": options,
        }
        if self.keep_loaded:
            spec["keep_loaded"] = True
        return spec


class Catalogue:
    """The models a front serves, addressable by id or alias."""

    def __init__(self, entries: list[ModelEntry], templates: dict[str, str] | None = None) -> None:
        self.entries = entries
        #: the text of each entry's chat_template option, by model id: a file the option
        #: names is read when the catalogue is loaded or saved (front.probe.with_templates)
        self.templates = templates or {}
        self._by_name: dict[str, ModelEntry] = {}
        for entry in entries:
            for name in entry.names():
                if name in self._by_name:
                    raise ConfigError(f"model name {name!r} is used by two catalogue entries")
                self._by_name[name] = entry
        for entry in entries:
            draft = draft_of(entry)
            if draft is not None and (found := self._by_name.get(draft)) is None:
                raise ConfigError(f"model {entry.id!r}: its draft model {draft!r} is not listed")
            if draft is not None and found is not None and found.format not in (None, "gguf"):
                raise ConfigError(f"model {entry.id!r}: its draft model {draft!r} is no GGUF")

    def resolve(self, name: str) -> ModelEntry | None:
        return self._by_name.get(name)


def draft_of(entry: ModelEntry) -> str | None:
    """The catalogue name of the draft model an entry's speculative option asks for."""
    option = entry.options.get("speculative")
    if isinstance(option, dict) and isinstance(option.get("draft"), str):
        return str(option["draft"])
    return None


def load_catalogue(path: Path) -> Catalogue:
    return catalogue_from(read_json(path), str(path))


def catalogue_from(data: Any, source: str) -> Catalogue:
    """Validate a catalogue given as data (a list, or {"models": [...]})."""
    items = data.get("models") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise ConfigError(f"{source}: expected a list of models (or {{'models': [...]}})")
    entries = []
    for i, item in enumerate(items):
        try:
            entries.append(ModelEntry.model_validate(item))
        except ValidationError as exc:
            raise ConfigError(f"model #{i}: " + file_problem(Path(source), exc)) from None
    return Catalogue(entries)
