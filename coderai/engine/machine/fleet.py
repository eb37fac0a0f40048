"""The fleet's host memory: the front and every process under it (engines, their
children), measured from `CODERAI_FRONT_PID` with psutil, so that every engine measures
the same total against the one cap (`offload.max_ram_gb`)."""

from __future__ import annotations

import os

import psutil


def fleet_usage(front_pid: int | None) -> dict[str, int]:
    """RSS in bytes by process: "front", each engine by its --name, "other" for the rest
    (an engine's own children count as "other"). Without a front pid (an in-process
    engine), this process and its children."""
    try:
        root = psutil.Process(front_pid if front_pid is not None else os.getpid())
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return {}
    usage: dict[str, int] = {}
    for process in processes:
        try:
            rss = process.memory_info().rss
            name = "front" if process.pid == root.pid else _engine_name(process.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue  # gone between the listing and the reading
        usage[name] = usage.get(name, 0) + rss
    return usage


def _engine_name(argv: list[str]) -> str:
    if "engine" in argv and "--name" in argv:
        at = argv.index("--name") + 1
        if at < len(argv):
            return f"engine {argv[at]}"
    return "other"
