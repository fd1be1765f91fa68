"""A warm pool of single-use sandboxes for the ``subprocess`` backend.

A slot is a cold run's launch started before its code exists: the same run folder,
cgroup, namespaces, size-capped tmpfs, dropped uid, seccomp filter and (network
on) slirp4netns, made by the same :meth:`~.isolation.Isolator.prepare` and
:mod:`.confine` chain. The only difference is the snippet file in the run folder
on the host: a FIFO instead of a file. Bubblewrap copies it into the run's
private tmpfs with ``--file``, the last step of its setup, so a slot waits there,
everything else done, until a run writes its code into the FIFO and closes it;
bubblewrap then finishes and execs the interpreter exactly as a cold run would.
stdin is what a cold run gets (``/dev/null``, or a pipe when the run gives text):
it is part of the slot's key.

A slot runs one snippet and then dies (it is a cold run's process tree from then
on: timeout, stop, kill and cleanup are the backend's own). Slots are kept per
:class:`PoolKey`, everything a launch is made from; before a slot is handed out
the parts of the host it was made from (hidden credential paths, interpreter
folders, the blocked networks) are looked at again, and every slot made from an
older view is dropped. Slots are started in worker threads, a few at a time;
how many are kept per key follows demand (the peak of runs at once, plus one),
within :class:`PoolConfig`'s limits, and an unused slot is retired.

The refill after a run waits a moment (:data:`REFILL_DELAY_SEC`) in its worker
before it starts the slot: starting one takes the GIL and a core, and right at a
run's end that time would come out of delivering the run's answer. The wait is in
the worker thread, not on the event loop, so a loop closed right after its call
(a kernel's ``run_sync``, the CLI) loses no refill; a run that finds its key
without an idle slot ends the wait at once (a burst needs its slots now).
"""

from .child import WarmChild
from .config import POOL_ENV, POOL_MAX_ENV, PRESTART_ENV, PoolConfig, PoolKey
from .refill import WarmPool
from .slot import Slot, write_all

__all__ = [
    "POOL_ENV",
    "POOL_MAX_ENV",
    "PRESTART_ENV",
    "PoolConfig",
    "PoolKey",
    "Slot",
    "WarmChild",
    "WarmPool",
    "write_all",
]
