"""Running an approved batch: skip what is done, report blocked items, run the rest.

Every finished item becomes one result record, appended to the results file
(when there is one) and yielded at once. The batch stops at its deadline or
when cancelled (Ctrl-C, Stop, a closed connection): what is left is cancelled,
what finished is kept, and the items not run are named in the report.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncGenerator, Callable, Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ..errors import RETRYABLE_CODES
from ..plans import ExecutionPlan
from .executors import Answer, Executor
from .output import ResultLog, held_results
from .plan import BatchPlan

#: Status of a record: the snippet ran (ok / failed / timed_out), was refused, or could not run.
STATUSES = ("ok", "failed", "timed_out", "blocked", "error")


@dataclass
class BatchProgress:
    """Counts as the batch goes: ``finished`` = ok + failed + timed_out + blocked + error."""

    total: int
    skipped: int = 0
    finished: int = 0
    ok: int = 0
    failed: int = 0
    timed_out: int = 0
    blocked: int = 0
    error: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def remaining(self) -> int:
        """Items neither skipped nor finished yet."""
        return self.total - self.skipped - self.finished

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready counts plus ``remaining`` and ``elapsed_sec``."""
        data = asdict(self)
        del data["started"]
        data["remaining"] = self.remaining
        data["elapsed_sec"] = round(time.monotonic() - self.started, 3)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BatchProgress:
        """The counts of a ``progress`` line (as :meth:`to_dict` wrote them)."""
        names = {f.name for f in fields(cls)} - {"started"}
        progress = cls(**{k: int(v) for k, v in data.items() if k in names})
        progress.started = time.monotonic() - float(data.get("elapsed_sec", 0))
        return progress

    def line(self) -> str:
        """One line for a terminal: ``120/300 done · 3 failed · 1 blocked · 12.3 s``."""
        done = self.finished + self.skipped
        parts = [f"{done}/{self.total} done"]
        for name in ("skipped", "failed", "timed_out", "blocked", "error"):
            if getattr(self, name):
                parts.append(f"{getattr(self, name)} {name.replace('_', ' ')}")
        parts.append(f"{time.monotonic() - self.started:.1f} s")
        return " · ".join(parts)


def result_record(item_id: str, plan: ExecutionPlan, answer: Answer) -> dict[str, Any]:
    """The result line of one item: id, digest, status, where it ran, then the envelope."""
    record: dict[str, Any] = {"id": item_id, "digest": plan.digest}
    result = answer.get("result")
    if result is not None:
        status = "ok" if result["exit_code"] == 0 else "failed"
        status = "timed_out" if result["timed_out"] else status
        record.update(status=status, worker=answer.get("worker"), host=answer.get("host"))
        record.update(result)
    else:
        record.update(
            status="error",
            worker=answer.get("worker"),
            language=plan.spec.language,
            backend=plan.spec.backend,
            error=answer.get("error"),
            code=answer.get("code"),
        )
    return record


def blocked_record(item_id: str, plan: ExecutionPlan) -> dict[str, Any]:
    """The record of a blocked item: reported, never run."""
    return {
        "id": item_id,
        "digest": plan.digest,
        "status": "blocked",
        "language": plan.spec.language,
        "backend": plan.spec.backend,
        "reason": plan.blocked_reason,
    }


@dataclass
class BatchWatch:
    """What a face sees of a batch run as it goes: progress, each record, the report.

    ``report`` is set when the run ends, also when it is stopped (a face's Ctrl-C):
    then it says ``stopped: cancelled`` and counts what finished.
    """

    on_progress: Callable[[BatchProgress], None] | None = None
    records: list[dict[str, Any]] = field(default_factory=list)
    report: dict[str, Any] | None = None
    #: The last progress seen.
    last: BatchProgress | None = None

    def progress(self, progress: BatchProgress) -> None:
        """A progress update, passed to the face."""
        self.last = progress
        if self.on_progress is not None:
            self.on_progress(progress)


def cancelled_report(
    batch: BatchPlan,
    records: list[dict[str, Any]],
    progress: BatchProgress | None,
    *,
    executor: str,
    out: str | Path | None,
) -> dict[str, Any]:
    """The report of a run stopped before its own report came (a closed stream, Ctrl-C)."""
    done = {str(record.get("id")) for record in records}
    counts = progress or BatchProgress(total=batch.count)
    return {
        "batch_id": batch.batch_id,
        "digest": batch.digest,
        "executor": executor,
        "out": str(out) if out is not None else None,
        "stopped": "cancelled",
        "not_run": [item_id for item_id in batch.items if item_id not in done],
        "lost": [],
        **counts.to_dict(),
    }


class BatchRun:
    """One run of an approved batch; iterate :meth:`results`, then read :meth:`report`."""

    def __init__(
        self,
        batch: BatchPlan,
        executor: Executor,
        *,
        out: str | Path | None = None,
        on_progress: Callable[[BatchProgress], None] | None = None,
    ) -> None:
        self.batch = batch
        self.executor = executor
        self.log = ResultLog(out) if out is not None else None
        self.on_progress = on_progress
        self.progress = BatchProgress(total=batch.count)
        #: ``None`` while running or when complete; ``deadline`` or ``cancelled`` when stopped.
        self.stopped: str | None = None
        self.not_run: list[str] = []
        #: Items that could not run because of the machinery (a worker lost for good): unrecorded.
        self.lost: list[str] = []

    def _tick(self) -> None:
        if self.on_progress is not None:
            self.on_progress(self.progress)

    def _count(self, record: dict[str, Any]) -> None:
        self.progress.finished += 1
        status = record["status"]
        setattr(self.progress, status, getattr(self.progress, status) + 1)
        # An item that could not run for the machinery's sake is not recorded: a rerun tries it.
        if status == "error" and (record.get("code") is None or record["code"] in RETRYABLE_CODES):
            self.lost.append(record["id"])
        elif self.log is not None:
            self.log.append(record)
        self._tick()

    async def results(self) -> AsyncGenerator[dict[str, Any], None]:
        """Yield each item's record as it finishes (blocked ones first, skipped ones never)."""
        batch = self.batch
        done = self.log.open({i: p.digest for i, p in batch.items.items()}) if self.log else {}
        pending: dict[str, None] = {}
        try:
            todo: list[tuple[str, ExecutionPlan]] = []
            for item_id, plan in batch.items.items():
                if item_id in done:
                    self.progress.skipped += 1
                elif plan.blocked:
                    record = blocked_record(item_id, plan)
                    self._count(record)
                    yield record
                else:
                    todo.append((item_id, plan))
            self._tick()
            pending = dict.fromkeys(item_id for item_id, _ in todo)
            answers = self.executor.map(todo, batch).__aiter__() if todo else None
            loop = asyncio.get_running_loop()
            deadline = loop.time() + batch.deadline_sec
            try:
                while pending and answers is not None:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        raise asyncio.TimeoutError
                    item_id, answer = await asyncio.wait_for(answers.__anext__(), remaining)
                    pending.pop(item_id, None)
                    record = result_record(item_id, batch.items[item_id], answer)
                    self._count(record)
                    yield record
            except asyncio.TimeoutError:
                self.stopped = "deadline"
            except (asyncio.CancelledError, GeneratorExit):
                self.stopped = "cancelled"
                raise
            except StopAsyncIteration:
                pass
            finally:
                if answers is not None:
                    await answers.aclose()  # type: ignore[attr-defined]
        finally:
            self.not_run = list(pending)
            if self.log is not None:
                self.log.close()

    def report(self) -> dict[str, Any]:
        """The outcome: counts, where it ran, whether and why it stopped, what did not run."""
        return {
            "batch_id": self.batch.batch_id,
            "digest": self.batch.digest,
            "executor": self.executor.name,
            "out": str(self.log.path) if self.log else None,
            "stopped": self.stopped,
            "not_run": self.not_run,
            "lost": self.lost,
            **self.progress.to_dict(),
        }


def held_records(batch: BatchPlan, out: str | Path) -> Iterable[dict[str, Any]]:
    """The batch's records in its results file (earlier runs' and this one's), one per item."""
    return held_results(out, {item_id: plan.digest for item_id, plan in batch.items.items()})


def counted_over_file(report: dict[str, Any], held: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """``report`` with its status counts taken over every record the results file holds.

    A resumed run tells the truth about the whole batch: ``ok``, ``failed``... count
    the items of earlier runs too, ``skipped`` (already done) says how many of them
    there were, and ``this_run`` keeps the counts of what ran this time.
    """
    counts = Counter(str(record.get("status")) for record in held)
    this_run = {name: report[name] for name in STATUSES}
    return {**report, **{name: counts[name] for name in STATUSES}, "this_run": this_run}
