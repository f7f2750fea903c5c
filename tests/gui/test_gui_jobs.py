"""app.jobs.Job: the one background-job helper ends in exactly one of finished / failed / cancelled."""

from __future__ import annotations

import threading

import pytest

from app.jobs import Job, run_in_background
from runtime.errors import CancelledError


def _watch(job: Job) -> dict[str, list]:
    seen: dict[str, list] = {"progress": [], "finished": [], "failed": [], "cancelled": []}
    job.progress.connect(seen["progress"].append)
    job.finished.connect(seen["finished"].append)
    job.failed.connect(seen["failed"].append)
    job.cancelled.connect(lambda: seen["cancelled"].append(True))
    return seen


def _ended(seen: dict[str, list]) -> bool:
    return bool(seen["finished"] or seen["failed"] or seen["cancelled"])


def test_job_reports_progress_then_finishes_on_a_pool_thread(qtbot) -> None:
    caller = threading.get_ident()

    def work(job: Job) -> int:
        for i in range(3):
            job.report(i)
        return threading.get_ident()

    job = Job(work)
    seen = _watch(job)
    job.start()
    qtbot.waitUntil(lambda: _ended(seen), timeout=10_000)
    assert seen["progress"] == [0, 1, 2] and not seen["failed"] and not seen["cancelled"]
    assert seen["finished"][0] != caller  # it ran off the GUI thread
    assert job.done.is_set()
    with pytest.raises(RuntimeError, match="runs once"):
        job.start()


@pytest.mark.parametrize(("raised", "ending"), [(FileNotFoundError("gone.txt"), "failed"),
                                                (CancelledError("stopped"), "cancelled")])
def test_job_ends_failed_with_the_exception_or_cancelled(qtbot, raised: Exception, ending: str) -> None:
    def work(job: Job) -> None:
        raise raised

    job = Job(work)
    seen = _watch(job)
    job.start()
    qtbot.waitUntil(lambda: _ended(seen), timeout=10_000)
    assert {k for k in ("finished", "failed", "cancelled") if seen[k]} == {ending}
    if ending == "failed":
        assert seen["failed"] == [raised]


def test_job_cancel_ends_cancelled_whatever_the_work_raises(qtbot) -> None:
    started = threading.Event()

    def work(job: Job) -> None:
        started.set()
        job.cancel_event.wait(10)
        raise OSError("socket closed")  # how a cancelled transfer often ends: not a CancelledError

    job = Job(work)
    seen = _watch(job)
    job.start()
    assert started.wait(10)
    job.cancel()
    qtbot.waitUntil(lambda: _ended(seen), timeout=10_000)
    assert seen["cancelled"] == [True] and not seen["failed"] and job.is_cancelled


def test_run_in_background_calls_back(qtbot) -> None:
    results: list = []
    errors: list = []
    jobs = [run_in_background(lambda: 6 * 7, results.append, errors.append),
            run_in_background(lambda: 1 / 0, results.append, errors.append)]
    qtbot.waitUntil(lambda: len(results) + len(errors) == 2, timeout=10_000)
    assert results == [42] and [type(e) for e in errors] == [ZeroDivisionError]
    assert all(job.done.is_set() for job in jobs)
