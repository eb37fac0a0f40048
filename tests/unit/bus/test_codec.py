from __future__ import annotations

from typing import Any

import msgpack
import pytest

from coderai.bus.checker import cooldown_of, gpu_readings, holds_of
from coderai.bus.codec import MAGIC, decode, encode, encode_body
from coderai.bus.kinds import MsgType
from coderai.bus.messages import (
    RECORDS,
    Cancel,
    Chunks,
    Done,
    EngineConfig,
    Fail,
    Heartbeat,
    Hello,
    Job,
    Message,
    ModelSpec,
)
from coderai.errors import BusProtocolError, ProtocolVersionMismatch

SAMPLES: list[Message] = [
    Hello("engine-0", 3, 1234, "cpu", ["fake", "gguf"], 8, "secret", ["GPU-1"]),
    Heartbeat("loading", ["a"], {"b": 0.5}, 100),
    Heartbeat(
        "ready",
        cooldown={"sensor": "gpu", "card": "GPU-a", "temp": 91.0, "since": 5.0},
        gpus={
            "GPU-a": {
                "vendor": "nvidia",
                "temp": 91.0,
                "vram_total_mb": 24576.0,
                "vram_used_mb": None,
            }
        },
    ),
    Chunks([1, "hello", 2, " wörld"]),
    Done(7, "stop", 3, 9),
    Fail(7, "model_error", "boom"),
    Job(9, {"id": "m", "path": "", "format": "fake", "options": {}}, "chat", "", [], 5, ["\n"]),
    Cancel(9),
]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_every_message_survives_a_round_trip(msg: Message) -> None:
    assert decode(encode(msg)) == msg


def test_every_type_has_a_record() -> None:
    assert set(RECORDS) == set(MsgType)


def test_optional_fields_take_their_defaults() -> None:
    msg = decode(encode_body(MsgType.HEARTBEAT, {"state": "ready"}))
    assert msg == Heartbeat("ready")


def test_unknown_fields_are_ignored_for_forward_compatibility() -> None:
    msg = decode(encode_body(MsgType.CANCEL, {"job_id": 4, "reason": "new field"}))
    assert msg == Cancel(4)


def test_a_float_field_accepts_an_integer() -> None:
    body = Job(1, {}, "completion", "p").body() | {"temperature": 0}
    msg = decode(encode_body(MsgType.JOB, body))
    assert isinstance(msg, Job)
    assert msg.temperature == 0


@pytest.mark.parametrize(
    ("frames", "fault"),
    [
        ([MAGIC, b"\x04"], "expected 3 frames"),
        ([b"HTTP", b"\x04", b"\x80"], "bad magic"),
        ([MAGIC, b"\x04\x04", b"\x80"], "type frame"),
        ([MAGIC, b"\x63", b"\x80"], "unknown message type"),
        ([MAGIC, b"\x04", b"\xc1"], "not valid msgpack"),
        ([MAGIC, b"\x04", msgpack.packb([1, 2])], "not a map"),
        ([MAGIC, b"\x04", msgpack.packb({"job_id": 1})], "lacks field"),
        (
            [MAGIC, b"\x04", msgpack.packb({"job_id": "1", "finish_reason": "stop",
                                            "prompt_tokens": 1, "completion_tokens": 1})],
            "DONE.job_id is str",
        ),
        (
            [MAGIC, b"\x04", msgpack.packb({"job_id": True, "finish_reason": "stop",
                                            "prompt_tokens": 1, "completion_tokens": 1})],
            "DONE.job_id is bool",
        ),
    ],
)  # fmt: skip
def test_malformed_frames_are_rejected_with_the_reason(frames: list[bytes], fault: str) -> None:
    with pytest.raises(BusProtocolError, match=fault):
        decode(frames)


def test_another_protocol_version_is_a_distinct_error() -> None:
    with pytest.raises(ProtocolVersionMismatch):
        decode([b"CAI2", b"\x04", msgpack.packb({})])


def test_engine_settings_are_checked_at_the_edge() -> None:
    assert EngineConfig.parse({"max_model_instances": 2}) == EngineConfig(2, None)
    assert EngineConfig.parse({"slots": 3}) == EngineConfig(slots=3)
    assert EngineConfig.parse({}) == EngineConfig()
    for bad in ({"max_model_instances": 0}, {"max_model_instances": True},
                {"memory_budget_mb": "lots"}, {"memory_budget_mb": -1},
                {"slots": 0}, {"slots": 2.5}):  # fmt: skip
        with pytest.raises(BusProtocolError):
            EngineConfig.parse(bad)


def test_a_model_spec_is_checked_at_the_edge() -> None:
    good = {"id": "m", "path": "/m.gguf", "format": "gguf", "options": {"n_ctx": 64}}
    assert ModelSpec.parse(good) == ModelSpec("m", "/m.gguf", "gguf", {"n_ctx": 64})
    for bad in (1, {**good, "options": None}, {k: v for k, v in good.items() if k != "path"}):
        with pytest.raises(BusProtocolError):
            ModelSpec.parse(bad)


@pytest.mark.parametrize(
    "cooldown",
    [{"sensor": "disk", "since": 1.0}, {"sensor": "cpu"}, "hot", {"sensor": "gpu", "since": "x"}],
)
def test_a_heartbeats_cooldown_is_checked_at_the_edge(cooldown: object) -> None:
    with pytest.raises(BusProtocolError):
        cooldown_of(cooldown)


@pytest.mark.parametrize(
    "gpus",
    [[], {"GPU-a": "hot"}, {"GPU-a": {"temp": 50}}, {"GPU-a": {"vendor": "amd", "temp": "50"}}],
)
def test_a_heartbeats_gpu_readings_are_checked_at_the_edge(gpus: object) -> None:
    with pytest.raises(BusProtocolError):
        gpu_readings(gpus)


@pytest.mark.parametrize(
    ("holds", "cut", "taken"),
    [
        ({"m": "a"}, [], 0),  # not a list
        ({"m": [1]}, [], 0),  # an affinity that is not a string
        ({"m": [""]}, [], 0),  # nor empty
        ({"m": ["x" * 65]}, [], 0),  # nor longer than a hash
        ({"m": ["a"] * 1025}, [], 0),  # nor more than the bound
        ({1: ["a"]}, [], 0),  # a model id that is not a string
        ({"m" * 257: ["a"]}, [], 0),  # nor longer than a name
        ({"m": ["a"]}, [3], 0),  # a cut model that is not a model id
        ({"m": ["a"]}, [], -1),  # a job id that is not one
        ({"m": ["a"]}, [], True),
        ({"m": ["a"]}, [], 1.5),
    ],
)
def test_a_heartbeats_holds_are_checked_at_the_edge(
    holds: dict[str, Any], cut: list[Any], taken: object
) -> None:
    with pytest.raises(BusProtocolError):
        holds_of(holds, cut, taken)


def test_a_heartbeats_holds_are_kept_as_sets() -> None:
    assert holds_of({"m": ["a", "b", "a"]}, ["m"], 7) == (
        {"m": frozenset({"a", "b"})}, frozenset({"m"}), 7)  # fmt: skip
    assert holds_of({}, [], 0) == ({}, frozenset(), 0)
