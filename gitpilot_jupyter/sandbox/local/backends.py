"""Local backends on asyncio: ``subprocess`` (isolated) and ``off`` (pass-through).

Each snippet runs in a fresh 0700 temp dir that is removed afterwards, in its
own process group, with stdin from ``/dev/null`` unless text is given. Both
pipes are drained concurrently under the output cap; on timeout the whole
group is killed and the output produced so far is kept; so it is when the
run is stopped (``request.stop``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import ClassVar

from ..backend import OutputCallback, RunRequest, SandboxBackend
from ..errors import ContainmentUnavailable, SandboxError
from ..languages import Interpreters, canonical_language, run_filename, snippet_filename
from ..records import PoolReport
from ..results import RunResult
from ..rich import NONCE_ENV, new_nonce, python_command, shim_env
from . import mplfonts, nsfree, outfiles, prestart
from .cleanup import (
    SPARE_DIRS,
    AfterRuns,
    make_run_dir,
    remove_orphaned_run_dirs_once,
    remove_tree,
)
from .enginereport import cgroup_fix
from .isolation import Isolator, Launch
from .launcherclient import LaunchedRun
from .layered import default_isolator
from .longlived import LongLived
from .pool import PoolConfig, PoolKey, Slot, WarmChild, WarmPool
from .supervise import _feed_slot, _feed_stdin, _kill_group, supervise

log = logging.getLogger(__name__)

BASE_LAYERS = ["tempdir", "env-scrub"]


def run_env(
    env: dict[str, str], workdir: Path, nonce: str = "", argv: Sequence[str] = ()
) -> dict[str, str]:
    """The snippet's environment: ``HOME`` and ``TMPDIR`` point into its own run folder,
    the run's display nonce (see :mod:`..rich.wire`), if it has one, is in
    ``GITPILOT_DISPLAY``, and a python command ``argv`` gets its compiled display shim
    (:func:`..rich.wire.shim_env`)."""
    home = {"HOME": str(workdir), "TMPDIR": str(workdir)}
    extra = {NONCE_ENV: nonce} if nonce else {}
    return {**env, **home, **extra, **shim_env(argv)}


def run_command(language: str, interpreter: str, filename: str) -> list[str]:
    """The command a run of ``filename`` starts: a python run's goes through the display
    shim (``python -c "<shim>" inline.py``, see :mod:`..rich`); plans still show
    ``python inline.py``."""
    if canonical_language(language) == "python":
        return python_command(interpreter, filename)
    return [interpreter, filename]


def _after_answer(callback: Callable[..., None], *args: object) -> None:
    """Call ``callback(*args)`` once the run's answer has gone to its caller.

    That is the event loop's next turn: handing work to a thread (a refill, the
    removal of a run's cgroup and folder) wakes it, and it would then share the
    cores and the GIL with the answer's last steps. Asyncio runs a callback that
    was queued before a coroutine's end even when that end stops the loop.
    """
    try:
        asyncio.get_running_loop().call_soon(callback, *args)
    except RuntimeError:  # no loop running (a sync caller): now
        callback(*args)


def remove_run(launch: Launch, workdir: Path, slot: Slot | None = None) -> None:
    """Remove an ended run's cgroup and folder, and let go of a warm slot's mount
    namespaces (blocking: the backend calls it in a worker thread after the answer)."""
    try:
        if launch.out_hold is not None:
            launch.out_hold.close()  # (when nothing was collected)
        launch.cleanup()
    finally:
        remove_tree(workdir)
        if slot is not None:
            slot.release_mount_namespace()


class SubprocessSandbox(SandboxBackend):
    """Runs snippets as local child processes with the strongest OS isolation available."""

    name: ClassVar[str] = "subprocess"

    def __init__(
        self,
        interpreters: Interpreters | None = None,
        isolator: Isolator | None = None,
        pool: PoolConfig | None = None,
    ) -> None:
        self.interpreters = interpreters or Interpreters()
        self.isolator = isolator if isolator is not None else self._default_isolator()
        #: The warm pool's limits (``auto`` by default, see :mod:`.pool`).
        self.pool_config = pool if pool is not None else PoolConfig.from_env()
        self._pool: WarmPool | None = None
        self._pool_error: list[str | None] = []
        #: Removes ended runs' cgroups and folders once they have answered.
        self.after_runs = AfterRuns()
        # Run folders of servers killed without cleanup (their cgroups: see layered).
        remove_orphaned_run_dirs_once()

    def pool(self) -> WarmPool | None:
        """The warm pool, made on first use; None when it is off or cannot work here."""
        if self._pool is None and self.pool_error() is None:
            # The pool holds this backend weakly: a backend dropped without aclose()
            # closes its pool (no slot outlives its owner, whatever its loop did).
            me = weakref.ref(self)

            def spawn(key: PoolKey) -> Slot:
                backend = me()
                if backend is None:
                    raise RuntimeError("the backend is gone")
                return backend._spawn_slot(key)

            def fingerprint(key: PoolKey) -> Hashable:
                backend = me()
                return None if backend is None else backend._slot_fingerprint(key)

            self._pool = WarmPool(self.pool_config, spawn, fingerprint)
            weakref.finalize(self, self._pool.close_now)
        return self._pool

    def pool_error(self) -> str | None:
        """Why runs are not started ahead here (None: they are); looked at once."""
        if not self._pool_error:
            self._pool_error.append(self._pool_unavailable())
        return self._pool_error[0]

    def _pool_unavailable(self) -> str | None:
        if not self.pool_config.enabled:
            return "turned off (pool = off)"
        if not hasattr(os, "pidfd_open"):
            return "this platform has no pidfd (Linux 5.3 or newer)"
        python = self.interpreters.resolve("python") or sys.executable
        if self.isolator.fingerprint([python, "inline.py"], allow_network=False) is None:
            return "only the bubblewrap launch chain can be started ahead"
        layers = self.isolator.layers()
        if (
            "rlimit-nproc" in layers
            and "own-uid" not in layers
            and self.isolator.engine != nsfree.ENGINE
        ):
            # The kernel counts RLIMIT_NPROC over every process of the server's user
            # namespaces: waiting slots would take the runs' allowance (and their own).
            # (Not where each run and slot has a uid of its own: bwrap's then count each
            # in its own user namespaces, see chainsteps.stage_steps. The namespace-free
            # engine has none: a root server's slots have a uid each, and a user's slot
            # counts what runs when it starts, as a cold run does.)
            return (
                "runs' process cap is RLIMIT_NPROC, which counts waiting slots and runs "
                f"together (no pids cgroup): {cgroup_fix()}"
            )
        return None

    def pool_report(self) -> PoolReport:
        """What status says of the warm pool: mode, limits, why not, and its counters."""
        config = self.pool_config
        pool = self._pool
        return {
            "mode": config.mode,
            "active": self.pool_error() is None,
            "reason": self.pool_error(),
            "max_slots": config.max_slots,
            "min_slots": config.min_slots,
            "idle_sec": config.idle_sec,
            "idle": pool.idle() if pool is not None else 0,
            "starting": pool.starting() if pool is not None else 0,
            "hits": pool.stats["hits"] if pool is not None else 0,
            "misses": pool.stats["misses"] if pool is not None else 0,
        }

    def prewarm(self, request: RunRequest) -> bool:
        """Start the slots of runs like ``request`` now; False when none are kept here."""
        pool = self.pool()
        interpreter = self.interpreters.resolve(request.language)
        if pool is None or interpreter is None:
            return False
        pool.prime(self._key(request, interpreter))
        return True

    def flush_pool(self) -> None:
        """Retire every waiting slot (the settings changed: new ones follow the new key)."""
        if self._pool is not None:
            self._pool.flush()

    def _key(self, request: RunRequest, interpreter: str) -> PoolKey:
        return PoolKey(
            language=canonical_language(request.language),
            interpreter=interpreter,
            allow_network=request.allow_network,
            limits=request.limits,
            env=tuple(sorted(request.env.items())),
            stdin=request.stdin is not None,
        )

    def _slot_fingerprint(self, key: PoolKey) -> Hashable:
        argv = run_command(key.language, key.interpreter, snippet_filename(key.language))
        return self.isolator.fingerprint(argv, allow_network=key.allow_network)

    def _spawn_slot(self, key: PoolKey) -> Slot:
        """Start a cold run's chain whose snippet is a FIFO (in a worker thread)."""
        workdir = Path(make_run_dir())
        fds: list[int] = []
        launch: Launch | None = None
        try:
            filename = snippet_filename(key.language)
            nonce = new_nonce()  # the slot's: one run takes it
            argv = run_command(key.language, key.interpreter, filename)
            env = run_env(dict(key.env), workdir, nonce, argv)
            fifo = workdir / filename
            started = self.pool_config.prestart and prestart.applies(key.language)
            walled = self.isolator.engine == nsfree.ENGINE
            if started and walled:
                # No private /tmp: the hook waits in a folder of the run's own.
                hook = workdir / nsfree.PRESTART_DIR
                hook.mkdir(mode=0o700)
                (hook / f"{prestart.HOOK_MODULE}.py").write_text(prestart.hook_source(filename))
                fifo = workdir / prestart.CODE_FIFO
                env = prestart.hook_env(env, str(hook))
            elif started:
                # The interpreter starts too and waits in its hook (see .prestart).
                (workdir / prestart.HOOK_FILE).write_text(prestart.hook_source(filename))
                fifo = workdir / prestart.CODE_FIFO
                env = prestart.hook_env(env)
            os.mkfifo(fifo, 0o600)
            fds.append(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))
            fds.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC))
            if started and not walled:
                # The chain's own output (see prestart.CHAIN_FIFO): read end open first,
                # so the staging shell's open of its write end does not wait.
                chain = workdir / prestart.CHAIN_FIFO
                os.mkfifo(chain, 0o600)
                fds.append(os.open(chain, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))
            fingerprint = self.isolator.fingerprint(argv, allow_network=key.allow_network)
            launch = self.isolator.prepare(
                argv, workdir=workdir, allow_network=key.allow_network, limits=key.limits
            )
            outfiles.prepare_out(workdir, launch)
            if key.language == "python" and self.isolator.engine in mplfonts.HOST_FOLDER_ENGINES:
                mplfonts.place_font_list(key.interpreter, workdir)
            if walled:
                # The wall is up before the slot waits (it is the launch's preexec_fn).
                nsfree.own_slot_files(workdir)
                launch.argv = nsfree.slot_argv(launch.argv, prestarted=started, env=env)
            try:
                popen = subprocess.Popen(
                    launch.argv,
                    cwd=str(workdir),
                    env=env,
                    stdin=subprocess.PIPE if key.stdin else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                    preexec_fn=launch.preexec_fn,
                )
            except BaseException:
                launch.cleanup()
                raise
            launch.on_started(popen.pid)
        except BaseException:
            for fd in fds:
                os.close(fd)
            if launch is not None and launch.out_hold is not None:
                launch.out_hold.close()
            remove_tree(workdir)
            raise
        # It took the spare its wall is built from (a cold run's, see .nsfree.SPARES):
        # the next is built now, in this worker, rather than on that run's path.
        launch.make_ahead()
        chain_output = fds[2] if started and not walled else -1
        slot = Slot(key, workdir, launch, popen, fds[1], fds[0], fingerprint, started, chain_output)
        slot.display_nonce = nonce
        if walled:
            slot.waits_at = 0 if started else 1  # no chain: the interpreter (or cat) waits
        return slot

    @staticmethod
    def _default_isolator() -> Isolator:
        return default_isolator()

    def hands_back_files(self) -> bool:
        """True: every engine's run folder has an ``out/`` collected after the run
        (:mod:`.outfiles`)."""
        return True

    def display_command(self, language: str, file: str | None = None) -> list[str]:
        """The command plans and results show: a file run's file by its own name."""
        return self.interpreters.display_command(language, file)

    def refusal(self, *, allow_network: bool = False) -> ContainmentUnavailable | None:
        """The refusal of a run this host cannot contain, unless the administrator accepts
        uncontained runs (the run then says so in its layers)."""
        gap = self.isolator.refusal(allow_network=allow_network)
        if gap is None or self.isolator.allow_uncontained:
            return None
        code = "network_unavailable" if gap["layer"] == "egress-only" else None
        return ContainmentUnavailable(f"refused: {gap['reason']}. To fix: {gap['fix']}", code=code)

    def isolation(self, *, allow_network: bool = False) -> list[str]:
        """Layers a run gets now: temp dir, env scrub, then the OS layers."""
        return BASE_LAYERS + self.isolator.layers(allow_network=allow_network)

    async def aclose(self) -> None:
        """Close the warm pool: its idle slots, their cgroups and folders are gone after."""
        pool, self._pool = self._pool, None
        self._pool_error = ["closed"]
        if pool is not None:
            await pool.aclose()
        await asyncio.sleep(0)  # removals queued for after their run's answer: handed over
        await asyncio.to_thread(self.after_runs.wait)

    def _clean_up_later(self, launch: Launch, workdir: Path, slot: Slot | None = None) -> None:
        """Remove the run's cgroup and folder after the answer (its processes are dead).

        Off the event loop, and after the answer: a burst of runs ending together
        would otherwise stall every other request, and each run its own answer. A
        warm run's slot lets go of its mount namespace here too (see :class:`.Slot`).
        """

        _after_answer(self.after_runs.submit, functools.partial(remove_run, launch, workdir, slot))

    async def run(self, request: RunRequest, on_output: OutputCallback | None = None) -> RunResult:
        """Run ``request`` in a fresh temp dir; see the module docstring."""
        language = request.language
        command = self.interpreters.display_command(language, request.named_after)
        started = time.monotonic()
        result = RunResult(
            backend=self.name,
            language=language,
            command=command,
            exit_code=-1,
            run_id=request.run_id,
            plan_id=request.plan_id,
        )
        refused = self.refusal(allow_network=request.allow_network)
        if refused is not None:
            raise refused
        interpreter = self.interpreters.resolve(language)
        if interpreter is None:
            missing = getattr(self.interpreters, language)
            result.stderr = (
                f"could not launch: the {language} interpreter {missing!r} is not installed "
                f"or not on PATH; install it to run {language} snippets"
            )
            return result

        # A warm slot waits for inline.*: a file run under its own name starts cold, and
        # so does a run with inputs (they are bound or moved into a folder being made).
        pool = self.pool() if request.named_after is None and not request.inputs else None
        key = self._key(request, interpreter) if pool is not None else None
        try:
            slot = None
            if pool is not None and key is not None:
                slot = await pool.acquire(key) if pool.config.mode == "always" else pool.take(key)
            if slot is not None and await self._run_warm(request, slot, result, on_output):
                result.warm = True
                return result
            # File system work (temp dir, snippet file, cgroup set-up) runs off the event
            # loop: many runs starting at once would otherwise stall every other request.
            workdir, launch = await asyncio.to_thread(self._prepare, request, interpreter)
            try:
                result.isolation = BASE_LAYERS + launch.layers
                nonce = new_nonce()
                proc = await self._spawn(request, launch, workdir, result, nonce)
                if proc is not None:
                    feed = _feed_stdin(proc, request.stdin) if request.stdin is not None else None
                    await supervise(request, launch, proc, feed, result, on_output, nonce)
                    await outfiles.hand_back(request, result, workdir, launch.out_hold)
            finally:
                self._clean_up_later(launch, workdir)
        finally:
            if pool is not None and key is not None:
                pool.done(key, refill=False)
                _after_answer(pool.refill)
            result.duration_ms = int((time.monotonic() - started) * 1000)
        return result

    async def _run_warm(
        self,
        request: RunRequest,
        slot: Slot,
        result: RunResult,
        on_output: OutputCallback | None,
    ) -> bool:
        """Run ``request`` in ``slot``; False (the slot destroyed) when it had died."""
        if not slot.alive():
            await asyncio.to_thread(slot.destroy)
            return False
        child: WarmChild | None = None
        supervised = False
        try:
            child = await slot.hand_out()
            result.isolation = BASE_LAYERS + slot.launch.layers
            # The code goes in now as far as the FIFO takes it (all of it, unless it is
            # longer than a pipe's buffer): the slot starts on it a turn of the loop
            # sooner. The rest goes in under supervision, as the stdin text does: a
            # chain that dies while copying it (past the file-size cap) leaves the write
            # waiting on a FIFO nobody reads, and only the run's exit, timeout or stop
            # end that. (Killed before the FIFO closes, no part of the code runs.)
            feed = _feed_slot(slot, slot.send_now(request.code), request.stdin)
            supervised = True  # from here on supervise kills the tree however it ends
            nonce = slot.display_nonce
            await supervise(request, slot.launch, child, feed, result, on_output, nonce)
            await outfiles.hand_back(request, result, slot.workdir, slot.launch.out_hold)
        finally:
            if not supervised:
                # Killed before the FIFO closes: a hand-over cut short never runs part of
                # the code.
                slot.launch.kill_all()
                _kill_group(slot.popen.pid)
            late = slot.chain_text()
            if late:
                log.warning("the launch chain of run %s wrote: %r", request.run_id, late[:2048])
            if child is not None:  # first: it stops watching fds the slot is about to close
                child.close_pipes()
            slot.close_fds()
            if slot.popen.stdin is not None:
                with contextlib.suppress(OSError):
                    slot.popen.stdin.close()
            self._clean_up_later(slot.launch, slot.workdir, slot)
        return True

    async def start_long_lived(self, request: RunRequest) -> LongLived:
        """Start ``request``'s code as a cold run is started, and hand the chain back.

        The same refusal, run folder, engine, launch plan, cgroup and rlimits as
        :meth:`run`; no timeout and no output cap (the caller drives the process and
        ends it with :meth:`.LongLived.stop`). Raises the refusal, or
        :class:`~..errors.SandboxError` when the interpreter is missing or the chain
        could not be started.
        """
        refused = self.refusal(allow_network=request.allow_network)
        if refused is not None:
            raise refused
        interpreter = self.interpreters.resolve(request.language)
        if interpreter is None:
            missing = getattr(self.interpreters, request.language)
            raise SandboxError(
                f"the {request.language} interpreter {missing!r} is not installed or not "
                f"on PATH; install it to run {request.language} snippets",
                code="interpreter_missing",
            )
        # A long-lived program (a session's kernel) is no snippet: no display shim.
        workdir, launch = await asyncio.to_thread(self._prepare, request, interpreter, False)
        result = RunResult(backend=self.name, language=request.language, command=[], exit_code=-1)
        proc = await self._spawn(request, launch, workdir, result)
        if proc is None:
            await asyncio.to_thread(remove_run, launch, workdir)
            raise SandboxError(result.stderr, code="launch_failed")
        return LongLived(workdir, launch, proc, BASE_LAYERS + launch.layers)

    def _prepare(
        self, request: RunRequest, interpreter: str, shim: bool = True
    ) -> tuple[Path, Launch]:
        """Make the run's 0700 temp dir, write the snippet into it, wrap the argv (a
        python run's through the display shim, unless ``shim`` is False; the
        namespace-free engine's folder is the one made ahead)."""
        walled = self.isolator.engine == nsfree.ENGINE
        workdir = Path(SPARE_DIRS.take() if walled else make_run_dir())
        try:
            filename = run_filename(request.language, request.named_after)
            (workdir / filename).write_text(request.code, encoding="utf-8")
            command = (
                run_command(request.language, interpreter, filename)
                if shim
                else [interpreter, filename]
            )
            launch = self.isolator.prepare(
                command,
                workdir=workdir,
                allow_network=request.allow_network,
                limits=request.limits,
                inputs=request.inputs,
            )
            outfiles.prepare_out(workdir, launch)
            python = shim and canonical_language(request.language) == "python"
            if python and self.isolator.engine in mplfonts.HOST_FOLDER_ENGINES:
                # After prepare: the run folder has its run's owner (see .mplfonts).
                mplfonts.place_font_list(interpreter, workdir)
        except BaseException:
            remove_tree(workdir)
            raise
        return workdir, launch

    async def _spawn(
        self,
        request: RunRequest,
        launch: Launch,
        workdir: Path,
        result: RunResult,
        nonce: str = "",
    ) -> asyncio.subprocess.Process | LaunchedRun | None:
        """Start a cold run's chain; None (the reason in ``result.stderr``) if it failed."""
        env = run_env(request.env, workdir, nonce, launch.argv)
        try:
            started = await launch.start(cwd=str(workdir), env=env, stdin=request.stdin is not None)
            proc = started or await asyncio.create_subprocess_exec(
                *launch.argv,
                cwd=str(workdir),
                env=env,
                stdin=asyncio.subprocess.PIPE
                if request.stdin is not None
                else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                preexec_fn=launch.preexec_fn,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            # SubprocessError: the isolation's preexec step (cgroup join, rlimits) failed.
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            result.stderr = f"could not launch {launch.argv[0]!r}: {reason}"
            return None
        launch.on_started(proc.pid)
        return proc


class NullSandbox(SubprocessSandbox):
    """``off``: no OS isolation and no resource limits; same envelope and policy.

    What ``off`` does: a fresh temp dir as the working folder (removed after the
    run), the allowlisted environment, the timeout and the output cap, and the kill
    of everything the run started when it ends (a cgroup per run where one can be
    made, else its process group and descendants). What it does not contain: the
    snippet runs as the server's user with its files, network, host sockets
    (the Docker socket included), ``/proc`` and devices, with no memory, process,
    disk or CPU limits; without a cgroup a ``setsid`` + double fork outlives it.
    """

    name: ClassVar[str] = "off"

    def refusal(self, *, allow_network: bool = False) -> ContainmentUnavailable | None:
        """None: ``off`` is pass-through by choice, and its plans say so."""
        return None

    @staticmethod
    def _default_isolator() -> Isolator:
        if sys.platform == "win32":
            return Isolator()
        from .layered import CleanupIsolator

        return CleanupIsolator()
