"""The progress bar the hub's library is given counts into a pull's Progress on both of
the library's download paths: plain HTTP (update per chunk) and Xet, whose reporter reads
and sets the bar's attributes and counts network bytes apart."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest
from huggingface_hub.utils._xet_progress_reporting import XetDownloadProgressReporter

from coderai.pull.download import Cancelled, Progress, _meter


@dataclass
class Report:
    total_bytes_completed: int
    total_transfer_bytes_completed: int
    total_bytes_completion_rate: float = 1.0
    total_transfer_bytes_completion_rate: float = 1.0
    total_bytes: int = 100


def xet(progress: Progress) -> XetDownloadProgressReporter:
    bar = _meter(progress)
    return XetDownloadProgressReporter(reconstruction_desc="f", total=100,
                                       log_level=logging.INFO, tqdm_class=bar)  # fmt: skip


def test_a_xet_download_counts_the_bytes_written() -> None:
    seen: list[int] = []
    progress = Progress(lambda p: seen.append(p.done), total=100)
    with xet(progress) as reporter:
        reporter.update_progress(Report(10, 30))
        reporter.update_progress(Report(60, 90))
    assert seen == [10, 60] and progress.done == 60


def test_a_plain_download_counts_each_chunk_and_a_resume_starts_where_it_was() -> None:
    progress = Progress(total=100)
    progress.finish(40)  # a first file of 40 bytes
    bar = _meter(progress)(total=60, initial=20)
    assert progress.done == 60  # 20 bytes of the second file were there
    bar.update(15)
    assert progress.done == 75


def test_a_cancel_stops_the_next_chunk() -> None:
    progress = Progress(total=100)
    bar = _meter(progress)(total=100)
    bar.update(5)
    progress.cancel()
    with pytest.raises(Cancelled):
        bar.update(5)
    assert progress.done == 5
    with pytest.raises(Cancelled):
        xet(progress).update_progress(Report(10, 10))
