"""One real `coderai engine` process against a test-side ROUTER playing the front."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
import zmq

from coderai.bus.codec import MAGIC, decode, encode
from coderai.bus.kinds import MsgType
from coderai.bus.messages import (
    Bye,
    Control,
    Done,
    Fail,
    Heartbeat,
    Hello,
    Job,
    Message,
    Refuse,
    Welcome,
)
from coderai.bus.sockets import bind_router
from coderai.engine.backends.fake import fake_tokens
from tests.support.bus import text_of

TOKEN = "test-token"
MODEL = {"id": "f", "path": "", "format": "fake", "options": {"output_tokens": 6}}


class FrontPeer:
    def __init__(self, tmp_path: Path, token: str = TOKEN) -> None:
        self.ctx = zmq.Context()
        endpoint = f"ipc://{tmp_path}/bus.sock"
        self.sock = bind_router(self.ctx, endpoint)
        env = {**os.environ, "CODERAI_BUS_TOKEN": token}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "coderai", "engine", "--name", "e", "--connect", endpoint,
             "--slots", "2", "--epoch", "7"],
            env=env,
        )  # fmt: skip
        self.identity = b""

    def recv(self, timeout_ms: int = 10_000) -> Message:
        assert self.sock.poll(timeout_ms), "the engine sent nothing"
        identity, *frames = self.sock.recv_multipart()
        self.identity = identity
        return decode(frames)

    def recv_until(self, kind: type[Message]) -> list[Message]:
        seen = []
        while True:
            msg = self.recv()
            seen.append(msg)
            if isinstance(msg, kind):
                return seen

    def send(self, msg: Message) -> None:
        self.send_raw(encode(msg))

    def send_raw(self, frames: list[bytes]) -> None:
        self.sock.send_multipart([self.identity, *frames])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self.sock.close(linger=0)
        self.ctx.term()


@pytest.fixture
def front(tmp_path: Path) -> Iterator[FrontPeer]:
    peer = FrontPeer(tmp_path)
    hello = peer.recv()
    assert isinstance(hello, Hello)
    assert (hello.name, hello.epoch, hello.slots, hello.token) == ("e", 7, 2, TOKEN)
    assert peer.identity == b"e:7"
    peer.send(Welcome(heartbeat_interval=0.2, liveness=5))
    yield peer
    peer.close()


def _job(job_id: int, **kw: object) -> Job:
    return Job(job_id, MODEL, "completion", prompt="hi", **kw)  # type: ignore[arg-type]


def test_a_job_streams_its_tokens_then_done(front: FrontPeer) -> None:
    front.send(_job(1))
    seen = front.recv_until(Done)
    assert text_of(seen, 1) == "".join(fake_tokens("hi", 0, 6))
    assert seen[-1] == Done(1, "stop", 1, 6)


def test_bad_jobs_fail_alone_and_the_engine_keeps_serving(front: FrontPeer) -> None:
    bad_messages = Job(2, MODEL, "chat", messages=[1, 2])
    front.send(bad_messages)
    fail = front.recv_until(Fail)[-1]
    assert isinstance(fail, Fail) and (fail.job_id, fail.kind) == (2, "bad_job")
    # fails validation (model is not a map) but its id is readable: still a FAIL
    front.send_raw([MAGIC, bytes([MsgType.JOB]), msgpack.packb({"job_id": 3, "model": 1})])
    fail = front.recv_until(Fail)[-1]
    assert isinstance(fail, Fail) and fail.job_id == 3
    front.send_raw([b"junk"])
    front.send_raw([MAGIC, bytes([MsgType.CANCEL]), b"\xc1"])
    front.send(_job(4))
    assert front.recv_until(Done)[-1] == Done(4, "stop", 1, 6)


def test_shutdown_control_ends_with_bye(front: FrontPeer) -> None:
    front.send(Control(ref=1, action="shutdown"))
    assert isinstance(front.recv_until(Bye)[-1], Bye)
    assert front.proc.wait(10) == 0


def test_a_shutdown_read_with_the_welcome_still_ends_with_bye(tmp_path: Path) -> None:
    peer = FrontPeer(tmp_path)
    try:
        assert isinstance(peer.recv(), Hello)
        peer.send(Welcome(heartbeat_interval=0.2, liveness=5))
        peer.send(Control(ref=1, action="shutdown"))
        assert isinstance(peer.recv_until(Bye)[-1], Bye)
        assert peer.proc.wait(10) == 0
    finally:
        peer.close()


def test_an_engine_refused_by_the_front_exits(tmp_path: Path) -> None:
    peer = FrontPeer(tmp_path, token="wrong")
    try:
        assert isinstance(peer.recv(), Hello)
        peer.send(Refuse("wrong bus token"))
        assert peer.proc.wait(10) == 3
    finally:
        peer.close()


def test_engine_only_is_an_alias_of_engine() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "coderai", "--engine-only", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "--connect" in out


def test_a_config_control_changes_settings_while_the_engine_runs(front: FrontPeer) -> None:
    """One instance of a single-sequence model serves one job at a time; two instances
    serve two at once (the second job's text arrives before the first job's DONE)."""
    model = {"id": "single", "path": "", "format": "fake",
             "options": {"capacity": 1, "tokens_per_second": 50, "output_tokens": 20}}  # fmt: skip

    def second_starts_before_first_ends(base: int) -> bool:
        front.send(Job(base, model, "completion", prompt="a"))
        front.send(Job(base + 1, model, "completion", prompt="b"))
        seen = front.recv_until(Done)
        seen += front.recv_until(Done)  # the other one
        # the messages before the second job's first text: did the first job end in them?
        first_text = next(i for i, m in enumerate(seen) if text_of([m], base + 1))
        before = seen[:first_text]
        return len(text_of(before, base)) < len(text_of(seen, base)) // 2

    assert not second_starts_before_first_ends(10)
    front.send(Control(ref=2, action="config", args={"max_model_instances": 2}))
    assert second_starts_before_first_ends(20)


def test_an_unload_control_unloads_an_idle_model(front: FrontPeer) -> None:
    front.send(_job(1))
    front.recv_until(Done)

    def loaded() -> list[str]:
        while True:
            msg = front.recv()
            if isinstance(msg, Heartbeat):
                return list(msg.loaded)

    assert loaded() == ["f"]
    front.send(Control(ref=3, action="unload", args={"model": "f"}))
    while loaded():  # heartbeats every 0.2 s; the next ones show it gone
        pass
