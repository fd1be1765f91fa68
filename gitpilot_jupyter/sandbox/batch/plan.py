"""A batch plan: every item planned as a single run would be, under one manifest digest.

The manifest digest covers each item's id and its run digest (canonical
language, code, stdin, timeout, network, backend) plus the batch's deadline, so
one approval token is bound to the whole manifest: changing any item refuses it.
Blocked items stay in the manifest; they are reported and never run.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import InvalidRequest, PlanNotFound, SandboxError, UnknownLanguage
from ..inputs import RunInput
from ..languages import language_for_path
from ..plans import Approval, ExecutionPlan, PlanStore
from ..records import PlanWarning
from ..request import RunOptions
from ..scan import scan
from ..spec import RunSpec
from .items import BatchItem

if TYPE_CHECKING:
    from ..service import SandboxService

#: Overall deadline of a batch unless the caller gives one, and its upper bound.
DEFAULT_DEADLINE_SEC = 3600
MAX_DEADLINE_SEC = 7 * 24 * 3600
#: Batches kept pending for approval, and approved ones kept for their run (oldest evicted).
MAX_BATCHES = 32


def new_batch_id() -> str:
    """``batch_`` + 16 hex characters."""
    return "batch_" + secrets.token_hex(8)


def manifest_digest(entries: Sequence[tuple[str, str]], deadline_sec: int) -> str:
    """The sha256 over every ``(item id, run digest)`` in order, and the deadline."""
    material = json.dumps(
        {"items": [list(e) for e in entries], "deadline_sec": deadline_sec},
        ensure_ascii=False,
    )
    return "sha256:" + hashlib.sha256(material.encode("utf-8")).hexdigest()


@dataclass
class BatchPlan:
    """What a batch would run: its items' plans in order, the scan summary, the digest."""

    batch_id: str
    items: dict[str, ExecutionPlan]
    deadline_sec: int
    digest: str
    requires_approval: bool
    created_at: float
    session_id: str | None = None
    #: Error text per item that could not be planned (unknown language, empty code...).
    invalid: dict[str, str] = field(default_factory=dict)

    @property
    def count(self) -> int:
        """How many items the batch holds (blocked ones included)."""
        return len(self.items)

    def item(self, item_id: str) -> ExecutionPlan:
        """One item's full plan (code included), for the approver to open."""
        try:
            return self.items[item_id]
        except KeyError:
            raise PlanNotFound(f"batch {self.batch_id} has no item {item_id!r}") from None

    def blocked(self) -> dict[str, str]:
        """Blocked item ids and why: they never run."""
        return {i: p.blocked_reason or "blocked" for i, p in self.items.items() if p.blocked}

    def summary(self) -> dict[str, Any]:
        """Count, languages, how many items carry each warning, which are blocked."""
        warnings: Counter[str] = Counter()
        severities: dict[str, str] = {}
        for plan in self.items.values():
            for label in {w["label"] for w in plan.warnings}:
                warnings[label] += 1
            for w in plan.warnings:
                severities.setdefault(w["label"], w["severity"])
        blocked = self.blocked()
        return {
            "count": self.count,
            "runnable": self.count - len(blocked),
            "languages": dict(Counter(p.spec.language for p in self.items.values())),
            "backends": sorted({p.spec.backend for p in self.items.values()}),
            "warnings": [
                {"label": label, "severity": severities[label], "items": n}
                for label, n in sorted(warnings.items(), key=lambda kv: (-kv[1], kv[0]))
            ],
            "high_risk": [i for i, p in self.items.items() if p.high_risk and not p.blocked],
            "blocked": [{"id": i, "reason": r} for i, r in blocked.items()],
        }

    def to_dict(self, *, items: bool = True) -> dict[str, Any]:
        """The plan as the API shows it; ``items`` adds every item's plan (code included)."""
        data: dict[str, Any] = {
            "batch_id": self.batch_id,
            "digest": self.digest,
            "deadline_sec": self.deadline_sec,
            "requires_approval": self.requires_approval,
            "created_at": self.created_at,
            **self.summary(),
        }
        if items:
            data["items"] = [{"id": i, **p.to_dict()} for i, p in self.items.items()]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BatchPlan:
        """Rebuild a batch plan received as JSON (its items included)."""
        items = {str(item["id"]): ExecutionPlan.from_dict(item) for item in data.get("items", [])}
        return cls(
            batch_id=data["batch_id"],
            items=items,
            deadline_sec=data["deadline_sec"],
            digest=data["digest"],
            requires_approval=data["requires_approval"],
            created_at=data["created_at"],
        )


def check_deadline(deadline_sec: object) -> int:
    """The batch deadline in seconds: the default when None, else 1..MAX_DEADLINE_SEC."""
    if deadline_sec is None:
        return DEFAULT_DEADLINE_SEC
    if isinstance(deadline_sec, bool) or not isinstance(deadline_sec, int):
        raise InvalidRequest("deadline_sec must be an integer number of seconds")
    if not 1 <= deadline_sec <= MAX_DEADLINE_SEC:
        raise InvalidRequest(f"deadline_sec must be within 1..{MAX_DEADLINE_SEC}")
    return deadline_sec


def file_warnings(file: str, content: str, known: list[PlanWarning]) -> list[PlanWarning]:
    """The scan of a file run through ``--each``, in its own language (none if unknown)."""
    try:
        language = language_for_path(file)
    except UnknownLanguage:
        return []
    labels = {w["label"] for w in known}
    return [
        PlanWarning(severity=w["severity"], label=w["label"], detail=f"in {file}: {w['detail']}")
        for w in scan(language, content)
        if w["label"] not in labels
    ]


#: What items share one look at their inputs by: the same inputs, language and file.
InputsKey = tuple[object, ...]
#: The inputs of a batch's items, sized and hashed (:func:`hash_inputs`), by their key.
HashedInputs = Mapping[InputsKey, tuple[RunInput, ...]]


def item_options(
    it: BatchItem,
    *,
    timeout_sec: int | None = None,
    backend: str | None = None,
    allow_network: bool | None = None,
    env: Sequence[str] | None = None,
) -> RunOptions:
    """The request item ``it`` makes as a single run (its own ``timeout_sec`` wins)."""
    return RunOptions(
        language=it.language,
        code=it.code,
        file=it.file if it.code is None else None,
        # A file read for the item runs under its name, as `jupyter sandbox run FILE`
        # does (not --each's bash wrapper, which writes the file under its name).
        filename=it.file if it.code is not None and it.content is None else None,
        timeout_sec=it.timeout_sec if it.timeout_sec is not None else timeout_sec,
        stdin=it.stdin,
        backend=backend,
        allow_network=allow_network,
        env=env or (),
        inputs=it.inputs,
    )


def _inputs_key(options: RunOptions) -> InputsKey:
    return (options.inputs, options.language, options.file)


def hash_inputs(
    service: SandboxService, items: Sequence[BatchItem], **same: Any
) -> dict[InputsKey, tuple[RunInput, ...]]:
    """The inputs of ``items`` sized and hashed, once per distinct set (a CSV read by
    every item is hashed once, not once an item); ``same``: :func:`item_options`'
    batch-wide options. Blocking: an async face calls it in a worker thread, then
    :func:`plan_batch` with what it found."""
    hashed: dict[InputsKey, tuple[RunInput, ...]] = {}
    for it in items:
        try:
            options = item_options(it, **same)
            key = _inputs_key(options)
            if options.inputs and key not in hashed:
                hashed[key] = service.planner.inputs_of(options)
        except SandboxError as exc:
            raise type(exc)(f"item {it.id!r}: {exc.message}", code=exc.code) from None
    return hashed


def plan_batch(
    service: SandboxService,
    items: Sequence[BatchItem],
    *,
    timeout_sec: int | None = None,
    backend: str | None = None,
    allow_network: bool | None = None,
    deadline_sec: int | None = None,
    session_id: str | None = None,
    env: Sequence[str] | None = None,
    hashed: HashedInputs | None = None,
) -> BatchPlan:
    """Plan every item exactly as a single run (``service.describe``); nothing is kept.

    An item's own ``timeout_sec`` wins over the batch's. An item that cannot be
    planned at all (unknown language, empty code, a file outside the root) fails
    the whole plan with an error naming it: the approver must see every item.
    ``hashed``: the items' inputs as :func:`hash_inputs` found them (else they are
    hashed here, on the caller's thread).
    """
    deadline = check_deadline(deadline_sec)
    same: dict[str, Any] = {
        "timeout_sec": timeout_sec,
        "backend": backend,
        "allow_network": allow_network,
        "env": env,
    }
    if hashed is None:
        hashed = hash_inputs(service, items, **same)
    plans: dict[str, ExecutionPlan] = {}
    for it in items:
        try:
            options = item_options(it, **same)
            plans[it.id] = service.planner.describe(
                options, session_id=session_id, inputs=hashed.get(_inputs_key(options))
            )
        except SandboxError as exc:
            raise type(exc)(f"item {it.id!r}: {exc.message}", code=exc.code) from None
        if it.file is not None and it.code is not None:
            plans[it.id].read_from = it.file
        if it.content is not None and it.file is not None:
            plans[it.id].warnings += file_warnings(it.file, it.content, plans[it.id].warnings)
    digest = manifest_digest([(i, p.digest) for i, p in plans.items()], deadline)
    return BatchPlan(
        batch_id=new_batch_id(),
        items=plans,
        deadline_sec=deadline,
        digest=digest,
        requires_approval=service.require_approval,
        created_at=time.time(),
        session_id=session_id,
    )


def _stand_in(batch: BatchPlan) -> ExecutionPlan:
    """The plan the batch's token store keeps for ``batch``: its id and manifest digest.

    Its spec only names what the batch spans (language ``batch``, no code): a token
    of this store redeems the batch (:meth:`BatchStore.redeem`), never this spec.
    """
    plans = batch.items.values()
    spec = RunSpec(
        language="batch",
        code="",
        stdin=None,
        timeout_sec=0,
        network=any(p.spec.network for p in plans),
        backend=",".join(sorted({p.spec.backend for p in plans})),
    )
    return ExecutionPlan(
        plan_id=batch.batch_id,
        goal=f"Run a batch of {batch.count} snippets",
        source="api",
        spec=spec,
        command=[],
        checks=[],
        warnings=[],
        blocked=False,
        requires_approval=batch.requires_approval,
        digest=batch.digest,
        created_at=batch.created_at,
        session_id=batch.session_id,
    )


class BatchStore:
    """Batch plans and their approvals, with the very token rules of single plans.

    Approval tokens come from a :class:`PlanStore` of its own (single use, 300 s,
    bound to the manifest digest, the session and the user, each refusal with its
    code), holding one stand-in plan per batch that carries the manifest digest.
    """

    def __init__(self, tokens: PlanStore | None = None, max_batches: int = MAX_BATCHES) -> None:
        self.tokens = tokens or PlanStore(max_pending=max_batches)
        self.max_batches = max_batches
        self._batches: OrderedDict[str, BatchPlan] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, batch: BatchPlan) -> None:
        """Keep ``batch`` pending for approval."""
        with self._lock:
            self._batches[batch.batch_id] = batch
            while len(self._batches) > self.max_batches:
                self._batches.popitem(last=False)
        self.tokens.add(_stand_in(batch))

    def get(self, batch_id: str) -> BatchPlan:
        """A known batch (pending or approved), or :class:`PlanNotFound`."""
        with self._lock:
            batch = self._batches.get(batch_id)
        if batch is None:
            raise PlanNotFound(f"no batch {batch_id!r} (unknown or evicted)")
        return batch

    def approve(
        self, batch_id: str, *, session_id: str | None = None, user: str | None = None
    ) -> Approval:
        """Mint the batch's single-use token (once: an approved batch is no longer pending)."""
        self.get(batch_id)
        return self.tokens.approve(batch_id, session_id=session_id, user=user)

    def redeem(
        self,
        token: object,
        batch_id: str,
        *,
        digest: str | None = None,
        session_id: str | None = None,
        user: str | None = None,
    ) -> BatchPlan:
        """Spend ``token`` for batch ``batch_id``; the batch to run.

        ``digest`` is the manifest the caller asks to run (items sent again); without
        it the approved manifest runs as it is. A digest other than the approved
        one refuses the token (``approval_mismatch``) and leaves it unspent.
        """
        batch = self.get(batch_id)
        self.tokens.redeem(token, digest=digest or batch.digest, session_id=session_id, user=user)
        return batch
