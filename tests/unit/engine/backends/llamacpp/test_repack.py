"""How llama.cpp's extra buffer types are decided for a model: the entry, then the heals,
then the machine's kept verdict; and how a death by SIGILL with them on heals the models
the dead incarnation listed, once."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from coderai.engine.backends.llamacpp import probe
from coderai.engine.backends.llamacpp.machine import machine_key
from coderai.engine.backends.llamacpp.repack import Kernels, decide

CPUINFO = "processor\t: 0\nmodel name\t: Intel Xeon\nflags\t\t: fpu avx512f amx_tile\n"
WORKS = {"works": True, "why": "a trial read a 512-token batch with them on"}


def test_the_entry_forces_either_way() -> None:
    off = {"/m.gguf": "it died of them"}
    assert decide(True, off, {"works": False, "why": "x"}, "/m.gguf").on is True
    assert decide(False, {}, WORKS, "/m.gguf").on is False


def test_a_healed_model_is_off_whatever_the_machine_says() -> None:
    decision = decide(None, {"/m.gguf": "it died of them"}, WORKS, "/m.gguf")
    assert (decision.on, decision.why) == (False, "it died of them")
    assert decide(None, {"/m.gguf": "x"}, WORKS, "/other.gguf").on is True


def test_a_verdict_is_named_by_the_cpu_the_build_and_the_seam() -> None:
    key = machine_key(CPUINFO, "AVX512 = 1 | AMX_INT8 = 1", "0.3.36", "")
    assert key == machine_key(CPUINFO, "AVX512 = 1 | AMX_INT8 = 1", "0.3.36", "")
    assert key != machine_key(CPUINFO.replace("amx_tile", ""), "AVX512 = 1 | AMX_INT8 = 1",
                              "0.3.36", "")  # fmt: skip
    assert key != machine_key(CPUINFO, "AVX512 = 1", "0.3.36", "")
    assert key != machine_key(CPUINFO, "AVX512 = 1 | AMX_INT8 = 1", "0.3.37", "")
    assert key != machine_key(CPUINFO, "AVX512 = 1 | AMX_INT8 = 1", "0.3.36", "probe:SIGILL")


@pytest.fixture
def kept(tmp_path: Path) -> Path:
    """A machine whose verdict is kept already, as `llamacpp-test.json` (no trial runs)."""
    (tmp_path / "llamacpp-test.json").write_text(json.dumps(WORKS))
    return tmp_path


def test_a_model_on_is_listed_while_loaded_and_the_list_goes_with_a_clean_exit(
    kept: Path,
) -> None:
    kernels = Kernels(kept, key="test")
    assert kernels.decide(None, "/m.gguf", "m").on
    live = kept / f"live-{os.getpid()}.json"
    assert json.loads(live.read_text()) == {"m": "/m.gguf"}
    assert kernels.report()["models"] == {"m": {"on": True, "why": WORKS["why"]}}
    kernels.released("m")
    assert json.loads(live.read_text()) == {}
    kernels.close()
    assert not live.exists()


def test_a_sigill_with_them_on_turns_them_off_for_the_models_listed(kept: Path) -> None:
    (kept / "live-4242.json").write_text(json.dumps({"m": "/m.gguf"}))
    kernels = Kernels(kept, key="test")
    kernels.after("4242:-4")
    assert not (kept / "live-4242.json").exists()
    decision = kernels.decide(None, "/m.gguf", "m")
    assert not decision.on
    assert "died of SIGILL (illegal instruction) with them on" in decision.why
    # kept for the machine at once: the next process reads it too
    assert "/m.gguf" in json.loads((kept / "heals-test.json").read_text())
    assert kernels.decide(None, "/other.gguf", "other").on
    # loaded with them off, it is not listed: a second SIGILL heals nothing more
    assert json.loads((kept / f"live-{os.getpid()}.json").read_text()) == {"other": "/other.gguf"}
    assert kernels.report()["machine"]["off_for"] == 1


@pytest.mark.parametrize("previous", ["4242:-9", "4242:1", "4242:0", "", "junk"])
def test_other_ends_heal_nothing(kept: Path, previous: str) -> None:
    (kept / "live-4242.json").write_text(json.dumps({"m": "/m.gguf"}))
    kernels = Kernels(kept, key="test")
    kernels.after(previous)
    assert kernels.decide(None, "/m.gguf", "m").on


def test_the_live_list_counts_instances_of_a_model(kept: Path) -> None:
    kernels = Kernels(kept, key="test")
    kernels.decide(None, "/m.gguf", "m")
    kernels.decide(None, "/m.gguf", "m")
    kernels.released("m")  # one of two instances went: the other still runs with them on
    assert json.loads((kept / f"live-{os.getpid()}.json").read_text()) == {"m": "/m.gguf"}
    assert "m" in kernels.report()["models"]
    kernels.released("m")
    assert json.loads((kept / f"live-{os.getpid()}.json").read_text()) == {}
    assert kernels.report()["models"] == {}


@pytest.mark.parametrize(
    ("trial", "kept_after"),
    [
        (probe.Trial(True, "ran"), True),
        (probe.Trial(False, "died", signal="SIGILL"), True),
        (probe.Trial(False, "the trial did not end within 120 s"), False),
        (probe.Trial(False, "a trial with them on failed (exit 1): ImportError"), False),
    ],
)
def test_only_what_the_kernels_did_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trial: probe.Trial, kept_after: bool
) -> None:
    monkeypatch.setattr(probe, "run", lambda: trial)
    kernels = Kernels(tmp_path, key="test")
    assert kernels.decide(None, "/m.gguf", "m").on is trial.works
    assert (tmp_path / "llamacpp-test.json").exists() is kept_after
