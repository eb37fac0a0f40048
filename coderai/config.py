"""Configuration (config.json), validated with pydantic, and where the front's state lives
beside it (the catalogue's file, the state database). The catalogue itself (models.json)
is catalogue/entries.py's.

The front owns the file; engines receive what they need over the bus.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from coderai.common.json_files import read_json
from coderai.common.validation import KeepAlive, Strict, file_problem
from coderai.errors import ConfigError

EngineBackend = Literal["nvidia", "vulkan", "cpu"]


class EngineSpecConfig(Strict):
    """One declared engine (server.engine_specs), for machines auto-detection gets wrong."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    backend: EngineBackend
    #: applied at spawn; an empty string is a value ("" hides every CUDA card)
    env: dict[str, str] = Field(default_factory=dict)
    capabilities: list[str] | None = None


#: requests one engine runs at once
Parallel = Annotated[int, Field(ge=1, le=4096)]
#: copies of one model an engine may hold
Instances = Annotated[int, Field(ge=1, le=64)]


#: how requests for a model on several engines choose one (front/dispatch/replicas.py)
RoutingPolicy = Literal["cache_aware", "round_robin", "least_loaded"]


class ServerConfig(Strict):
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    #: number of engine processes; 0 = auto (one per GPU, at least one)
    engines: int = Field(0, ge=0, le=64)
    #: one engine per listed NVIDIA GPU (index or UUID); overrides `engines`
    engine_gpus: list[int | str] | None = None
    #: explicit engines; override `engine_gpus` and `engines`
    engine_specs: list[EngineSpecConfig] | None = None
    #: requests one engine runs at once (its credit on the bus)
    max_parallel_requests: Parallel = 8
    #: per engine name, e.g. {"nvidia": 16, "radeon": 2}
    max_parallel_requests_overrides: dict[str, Parallel] = Field(default_factory=dict)
    #: how requests for a model with replicas choose one (front/dispatch/replicas.py)
    routing: RoutingPolicy = "cache_aware"
    #: cache_aware: jobs a conversation's replica may carry beyond the least loaded one's
    #: before the conversation moves there
    routing_load_bound: int = Field(4, ge=0)
    #: requests the front holds while every engine is busy; beyond it, 429
    max_queue: int = Field(1024, ge=0)
    #: longest a request may wait in the queue before it is answered 503
    queue_timeout: float = Field(300.0, gt=0)
    #: seconds the queue advises clients to wait after a 429
    retry_after: int = Field(1, ge=1)
    heartbeat_interval: float = Field(1.0, gt=0)
    #: missed heartbeats before an engine is presumed dead
    heartbeat_liveness: int = Field(5, ge=1)
    #: the same while the engine reports a model load (a load may hold the GIL for a while)
    heartbeat_liveness_loading: int = Field(30, ge=1)
    #: how long a drained engine's requests may run before they are cancelled with an error
    drain_grace_seconds: float = Field(30.0, ge=0)
    #: how long in-flight requests may finish after SIGTERM/SIGINT
    shutdown_grace_seconds: float = Field(10.0, ge=0)
    #: how long a started engine may take to say HELLO before it is killed (a start failure)
    engine_join_timeout: float = Field(60.0, gt=0)
    #: text a stream's client may lag behind by (characters held in the front for it)
    #: before its engine holds the sequence until the client catches up
    stream_backlog_chars: int = Field(256 * 1024, ge=1024)
    #: how long a stream may wait for its client to read before it is ended with an error
    stream_stall_timeout: float = Field(60.0, gt=0)
    #: a stream's longest silence before its first token: it opens at once when its
    #: prompt is admitted (or after this long waiting for that: a queue, a model load),
    #: then sends a keep-alive with the prompt's progress at this interval while the
    #: prompt is read (agents give up on a silent connection)
    stream_keepalive_seconds: float = Field(10.0, gt=0)
    #: run the front and one engine in one process (no isolation; for small machines)
    single_process: bool = False
    default_engine: str | None = None
    #: where the front keeps users, API keys, sessions and usage (coderai.db); relative
    #: to the config file's folder, which is also the default
    state_dir: str | None = None


class OffloadConfig(Strict):
    #: one ceiling on host RAM for the whole fleet (the front, every engine and their
    #: children), in GiB; 0: none
    max_ram_gb: float = Field(0.0, ge=0)


class ClusterConfig(Strict):
    #: a TCP endpoint (e.g. tcp://0.0.0.0:7760) where engines and nodes on other machines
    #: join the bus with CURVE keys on the allow-list (`coderai cluster`); None: off
    bind: str | None = None
    #: a head's cluster endpoint (tcp://HEAD:7760): this whole node joins it as one
    #: engine, and keeps serving its own clients; None: a node of no head
    head: str | None = None
    #: the head's public key file (`coderai cluster keygen` on the head made it)
    head_key: str | None = None
    #: this node's secret key file; its public key is on the head's allow-list
    key: str | None = None
    #: the name the head allowed this node's key with
    name: str | None = None

    @field_validator("bind", "head")
    @classmethod
    def _tcp(cls, endpoint: str | None) -> str | None:
        if endpoint is not None and not endpoint.startswith("tcp://"):
            raise ValueError("cluster endpoints are tcp:// endpoints")
        return endpoint

    @model_validator(mode="after")
    def _a_head_needs_keys(self) -> ClusterConfig:
        if self.head is not None:
            missing = [k for k in ("head_key", "key", "name") if not getattr(self, k)]
            if missing:
                raise ValueError(f"cluster.head is set, so cluster.{missing[0]} is needed too")
        return self


class BrokerConfig(Strict):
    """An AISBF broker this node offers itself to, over an outbound WebSocket (so it works
    behind NAT); off while `url` is unset."""

    #: ws(s)://HOST/api/coderai/wss, or /api/u/{username}/coderai/wss
    url: str | None = None
    provider_id: str | None = None
    client_id: str | None = None
    username: str | None = None
    registration_token: str | None = None
    #: what the node tells the broker it is reachable at (informational); default: none
    endpoint: str = ""
    heartbeat_seconds: float = Field(30.0, gt=0)
    #: WebSocket pings; a broker that does not answer one within half this is dropped
    ping_seconds: float = Field(20.0, gt=0)
    #: reconnect waits double from one second up to this
    reconnect_max_seconds: float = Field(60.0, ge=1)

    @model_validator(mode="after")
    def _complete(self) -> BrokerConfig:
        if self.url is None:
            return self
        if not self.url.startswith(("ws://", "wss://")):
            raise ValueError("broker.url must be a ws:// or wss:// URL")
        missing = [k for k in ("provider_id", "client_id", "registration_token")
                   if not getattr(self, k)]  # fmt: skip
        if missing:
            raise ValueError(f"broker.url is set, so broker.{missing[0]} is needed too")
        return self


class SearchConfig(Strict):
    """The search backend that Anthropic's web_search and web_fetch server tools run on
    (front/web/): a SearXNG instance's JSON API. Off while `url` is unset: a call is then
    answered as unavailable."""

    #: http(s)://HOST[:PORT] of a SearXNG instance whose `json` format is enabled
    url: str | None = None
    #: results one search returns at most
    max_results: int = Field(5, ge=1, le=20)
    #: a search's or a fetch's whole time
    timeout_seconds: float = Field(10.0, gt=0, le=120)
    #: a fetched page's bytes read at most (the rest is cut), and its text's characters
    fetch_max_bytes: int = Field(2_000_000, ge=1024, le=50_000_000)
    fetch_max_chars: int = Field(100_000, ge=1000)
    #: whether web_fetch may reach addresses that are not public (loopback, private
    #: networks, link-local: the host's own services and cloud metadata); off by default
    fetch_private: bool = False

    @model_validator(mode="after")
    def _http(self) -> SearchConfig:
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError("search.url must be an http:// or https:// URL")
        return self


class MediaConfig(Strict):
    """Images by URL, for a model that reads images (a vision projector): fetched by the
    front only where `fetch_urls` allows (off: such an image is a placeholder naming this
    setting), within a size and a time, from public addresses only unless
    `fetch_private`."""

    fetch_urls: bool = False
    max_image_bytes: int = Field(20_000_000, ge=1024, le=100_000_000)
    timeout_seconds: float = Field(10.0, gt=0, le=120)
    fetch_private: bool = False


class ModelsConfig(Strict):
    #: catalogue path, relative to the config file's folder
    catalogue: str = "models.json"
    #: copies of one model an engine may hold to serve requests in parallel
    max_model_instances: Instances = 1
    max_model_instances_overrides: dict[str, Instances] = Field(default_factory=dict)
    #: memory an engine may fill with models before unloading idle ones (0 = what is free)
    memory_budget_mb: int = Field(0, ge=0)
    #: seconds a model may stay idle before it is unloaded (an entry's keep_alive
    #: overrides it); -1: never, only to make room for another
    keep_alive: KeepAlive = -1.0


class AuthConfig(Strict):
    #: bearer key for /admin/api/*; when unset, a random one is made and logged at start
    admin_key: str | None = Field(None, min_length=8)
    #: /v1 answers only to API keys; unset: required unless the front binds a loopback address
    require_api_key: bool | None = None
    #: how long a console login lasts
    session_hours: float = Field(12.0, gt=0)
    #: wrong passwords: each one is answered this much later than the one before
    login_delay_seconds: float = Field(0.5, ge=0)
    #: wrong passwords for one user or from one address, within the window, that lock it
    login_max_failures: int = Field(5, ge=1)
    login_window_seconds: float = Field(900.0, gt=0)
    login_lock_seconds: float = Field(300.0, gt=0)


Celsius = Annotated[float, Field(gt=0, le=150)]


class Thresholds(Strict):
    """A pause starts at `high` and ends at `resume` (°C), so it does not flap."""

    high: Celsius
    resume: Celsius

    @model_validator(mode="after")
    def _resume_below_high(self) -> Thresholds:
        if self.resume >= self.high:
            raise ValueError("resume must be below high")
        return self


class ThermalConfig(Strict):
    """When engines pause to cool. The CPU pauses every engine; a GPU, the engine that
    owns it, judged by its vendor's override if there is one."""

    cpu_high: Celsius = 90.0
    cpu_resume: Celsius = 80.0
    gpu_high: Celsius = 85.0
    gpu_resume: Celsius = 75.0
    #: per GPU vendor ("nvidia", "amd", "intel"), e.g. {"amd": {"high": 95, "resume": 92}}
    gpu_overrides: dict[str, Thresholds] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _resume_below_high(self) -> ThermalConfig:
        for part in ("cpu", "gpu"):
            if getattr(self, f"{part}_resume") >= getattr(self, f"{part}_high"):
                raise ValueError(f"{part}_resume must be below {part}_high")
        return self


class Config(Strict):
    """The whole file: a key nobody reads (a typo, or a section of a feature that does not
    exist yet) is refused with its name, never silently ignored."""

    server: ServerConfig = Field(default_factory=ServerConfig)
    models: ModelsConfig = Field(default_factory=ModelsConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    thermal: ThermalConfig = Field(default_factory=ThermalConfig)
    offload: OffloadConfig = Field(default_factory=OffloadConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    broker: BrokerConfig = Field(default_factory=BrokerConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    media: MediaConfig = Field(default_factory=MediaConfig)

    @model_validator(mode="after")
    def _unique_engine_names(self) -> Config:
        names = [s.name for s in self.server.engine_specs or []]
        if len(names) != len(set(names)):
            raise ValueError("server.engine_specs has two engines with one name")
        return self


def engine_settings(config: Config, name: str) -> dict[str, Any]:
    """What the front tells one engine in WELCOME and CONTROL config, overrides resolved
    by engine name."""
    models = config.models
    return {
        "slots": engine_slots(config, name),
        "max_model_instances": models.max_model_instances_overrides.get(
            name, models.max_model_instances
        ),
        "memory_budget_mb": models.memory_budget_mb,
        "thermal": config.thermal.model_dump(),
        "max_ram_mb": config.offload.max_ram_gb * 1024,
        # a load that waits for room elsewhere gives up when a queued request would
        "room_wait_seconds": config.server.queue_timeout,
    }


def engine_slots(config: Config, name: str) -> int:
    server = config.server
    return server.max_parallel_requests_overrides.get(name, server.max_parallel_requests)


def load_config(path: Path | None) -> Config:
    """Read config.json; a missing default file means the documented defaults."""
    if path is None:
        return Config()
    try:
        return Config.model_validate(read_json(path))
    except ValidationError as exc:
        raise ConfigError(file_problem(path, exc)) from None


def catalogue_path(config: Config, config_path: Path | None) -> Path:
    base = config_path.parent if config_path is not None else Path.cwd()
    return base / config.models.catalogue


@dataclass(frozen=True)
class StateFiles:
    """Where the front's state lives: the two human-editable files, and the folder of the
    database (users, API keys, sessions, usage)."""

    config: Path
    catalogue: Path
    state_dir: Path

    @classmethod
    def of(cls, config: Config, config_path: Path | None) -> StateFiles:
        base = config_path.parent if config_path is not None else Path.cwd()
        state_dir = base / config.server.state_dir if config.server.state_dir else base
        return cls(
            config=config_path if config_path is not None else base / "config.json",
            catalogue=catalogue_path(config, config_path),
            state_dir=state_dir,
        )
