"""Loaded model instances of one engine. Loading runs on its own thread so that a load
never stalls the decode loop of models already resident, nor the engine's socket."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from coderai.engine.backends.base import Backend, LoadProgress, ModelInstance
from coderai.errors import JobError


def instance_key(spec: dict[str, Any]) -> str:
    """Two specs that differ in any option are two instances."""
    return json.dumps(spec, sort_keys=True, default=str)


@dataclass
class _Loading:
    model_id: str
    future: Future[ModelInstance]
    progress: LoadProgress


class ModelPool:
    def __init__(self, backends: dict[str, Backend], on_loaded: Callable[[str], None]) -> None:
        self._backends = backends
        self._on_loaded = on_loaded
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="loader")
        self.instances: dict[str, tuple[str, ModelInstance]] = {}
        self.loading: dict[str, _Loading] = {}

    def get(self, spec: dict[str, Any]) -> ModelInstance | None:
        """The resident instance, or None after making sure a load is under way."""
        key = instance_key(spec)
        resident = self.instances.get(key)
        if resident is not None:
            return resident[1]
        if key not in self.loading:
            backend = self._backends.get(str(spec.get("format")))
            if backend is None:
                raise JobError(
                    f"this engine cannot run format {spec.get('format')!r}", kind="unsupported"
                )
            progress = LoadProgress()
            future = self._executor.submit(backend.load, spec, progress)
            future.add_done_callback(lambda _f: self._on_loaded(key))
            self.loading[key] = _Loading(str(spec.get("id")), future, progress)
        return None

    def finish_load(self, key: str) -> ModelInstance:
        """Called on the scheduler thread once a load ends; raises what the load raised."""
        loading = self.loading.pop(key)
        instance = loading.future.result()
        self.instances[key] = (loading.model_id, instance)
        return instance

    def loaded_ids(self) -> list[str]:
        return sorted({model_id for model_id, _ in list(self.instances.values())})

    def load_progress(self) -> dict[str, float]:
        return {ld.model_id: ld.progress.fraction for ld in list(self.loading.values())}

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
