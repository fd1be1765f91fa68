"""The OS isolator of the ``subprocess`` backend: namespaces, cgroups, rlimits.

On Linux a run is wrapped by bubblewrap (else ``unshare``), joins a per-run
cgroup for memory and process limits where one can be made (else rlimits),
and gets rlimits for file size and CPU time. Other POSIX systems get the
rlimits they enforce. Where ``/bin/sh`` and ``prlimit`` are found, the cgroup
join and the rlimits are done by the exec'd command itself: by the bubblewrap
chain's staging shell (:func:`.chainsteps.stage_steps`, no process of its own), else by a tiny
``sh`` prefix before the namespace tool starts. With no ``preexec_fn`` CPython can
``vfork`` instead of copying the whole server with ``fork``. Elsewhere a
``preexec_fn`` does the same. What is found is probed once and cached; each run
re-checks it cheaply. Layers are only named when they are in force.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..backend import ResourceLimits
from ..inputs import StagedInput
from ..records import IsolationGap, IsolationReport
from . import blockednets, cgroups, enginereport, landlock, namespaces, nsfree, subids
from .chainsteps import launch_tools, stage_steps
from .cleanup import SPARE_DIRS
from .confine import View, jupyter_dirs, needed_paths, plan_view
from .enginereport import LINUX, Engine, cgroup_fix, disabled, own_uids
from .inputs import move_inputs
from .isolation import (
    HOST_NETWORK_LAYER,
    ISOLATION_CHOICES,
    ISOLATION_ENV,
    UNCONTAINED_LAYER,
    Isolator,
    Launch,
)
from .launches import LayeredLaunch, WalledLaunch
from .lookup import Lookup
from .namespaces import Hidden
from .rlimits import RlimitPlan, plan_rlimits

_CGROUP_CACHE: dict[str | None, tuple[cgroups.CgroupTree | None, list[str]]] = {}


def _cgroup_tree(delegated: str | None = None) -> tuple[cgroups.CgroupTree | None, list[str]]:
    """The cgroup tree (under ``delegated``, else the server's own cgroup), detected
    once per process and re-checked by a stat."""
    if delegated in _CGROUP_CACHE:
        tree, reasons = _CGROUP_CACHE[delegated]
        if tree is None or tree.still_there():
            return tree, reasons
    _CGROUP_CACHE[delegated] = cgroups.detect(delegated)
    tree = _CGROUP_CACHE[delegated][0]
    if tree is not None:
        # Once per process: what servers killed without cleanup left behind.
        cgroups.remove_orphans(tree)
    return _CGROUP_CACHE[delegated]


def _delegated(environ: Mapping[str, str], value: str | None) -> tuple[str | None, str | None]:
    """The delegated cgroup path from ``value`` (else :data:`cgroups.CGROUP_ENV`), or the error."""
    try:
        return cgroups.delegated_path(
            environ.get(cgroups.CGROUP_ENV) if value is None else value
        ), None
    except ValueError as exc:
        return None, str(exc)


def _whole(environ: Mapping[str, str]) -> object:
    """All of ``environ``, to compare with a later one: for ``os.environ`` a copy of the
    bytes it keeps (``_data``, which each change goes through; 0.1 us instead of
    13 us to decode every variable), else its items."""
    data = getattr(environ, "_data", None) if environ is os.environ else None
    return dict(data) if isinstance(data, dict) else tuple(environ.items())


def _existing(candidates: tuple[tuple[str, ...], tuple[str, ...]], lookup: Lookup) -> Hidden:
    """Those of the candidate (folders, files) that exist, resolved, sorted."""
    dirs, files = candidates
    return sorted(map(Path, lookup.folders(dirs))), sorted(map(Path, lookup.files(files)))


#: Interpreters whose view :meth:`LayeredIsolator.host_view` keeps (more: it starts over).
_VIEWS_KEPT = 16


@dataclass(frozen=True)
class HostView:
    """What a bwrap run sees of the host, as :meth:`LayeredIsolator.host_view` found it."""

    hidden: Hidden
    view: View
    #: The view in words, and which file (device, inode; None: gone) each folder or
    #: file it binds or covers is.
    identity: Hashable


class LayeredIsolator(Isolator):
    """The strongest isolation this machine offers, within what was asked for.

    ``namespaces`` caps the engine: ``auto`` (bwrap, else the namespace-free
    ``landlock``, else ``unshare``, which is no wall: its runs are refused unless
    ``allow_uncontained``), ``bwrap``, ``landlock``, ``unshare`` or ``none``;
    default from ``GITPILOT_SANDBOX_ISOLATION``. ``cgroups`` False uses rlimits only.
    ``cgroup_parent``: a cgroup delegated to the server's user that run cgroups are made
    under (default from ``GITPILOT_SANDBOX_CGROUP``; unset: the server's own).
    ``environ`` and ``home`` decide which credential folders are hidden.
    """

    def __init__(
        self,
        namespaces: str | None = None,
        *,
        cgroups: bool = True,
        environ: Mapping[str, str] | None = None,
        home: Path | None = None,
        cgroup_parent: str | None = None,
        allow_uncontained: bool | None = None,
    ) -> None:
        self.environ = os.environ if environ is None else environ
        super().__init__(allow_uncontained=allow_uncontained)
        raw = self.environ.get(ISOLATION_ENV, "").strip().lower() if namespaces is None else None
        choice = namespaces if namespaces is not None else raw or "auto"
        self.choice_error: str | None = None
        if choice not in ISOLATION_CHOICES:
            self.choice_error = (
                f"{ISOLATION_ENV}={choice!r} is not one of {list(ISOLATION_CHOICES)}; using auto"
            )
            choice = "auto"
        self.choice = choice
        self.use_cgroups = cgroups
        self.home = home
        self.cgroup_parent, self.cgroup_error = _delegated(self.environ, cgroup_parent)
        #: (home and environment, the hidden paths' candidates): see :meth:`hidden_paths`.
        self._candidates: tuple[object, tuple[tuple[str, ...], tuple[str, ...]]] | None = None
        #: Per interpreter: (what it depends on, its lookup, the view): see :meth:`host_view`.
        self._views: dict[str, tuple[Hashable, Lookup, HostView]] = {}

    # -- what is available -----------------------------------------------------------

    def _engine(self) -> tuple[Engine | None, list[dict[str, str]]]:
        """The engine to use now, strongest first, and why stronger ones are not used."""
        return enginereport.choose_engine(self.choice)

    def _namespaces(self) -> tuple[namespaces.Namespaces | None, list[dict[str, str]]]:
        """The namespace tool in force (None: none, or the namespace-free engine)."""
        engine, missing = self._engine()
        return (engine if isinstance(engine, namespaces.Namespaces) else None), missing

    @property
    def engine(self) -> str:  # type: ignore[override]
        """The engine in force now: ``bwrap``, ``landlock``, ``unshare`` or ``none``."""
        engine, _ = self._engine()
        return engine.kind if engine is not None else "none"

    def engine_tool(self) -> Engine | None:
        """The engine in force now, for :mod:`.showplan` (None: no namespace tool)."""
        return self._engine()[0]

    def refusal(self, *, allow_network: bool = False) -> IsolationGap | None:
        """Why a run (network on: ``allow_network``) cannot be contained here, or None."""
        engine, missing = self._engine()
        return enginereport.refusal(engine, missing, allow_network=allow_network)

    def gaps(self, *, allow_network: bool = False) -> list[IsolationGap]:
        """What the engine in force cannot keep from a run, and memory left uncapped."""
        engine, _ = self._engine()
        return enginereport.gaps(engine, self._cgroups)

    def _cgroups(self) -> tuple[cgroups.CgroupTree | None, list[dict[str, str]]]:
        if not LINUX:
            return None, []
        if not self.use_cgroups:
            return None, [disabled("cgroups", "rlimits only", by="the isolator's configuration")]
        tree, reasons = _cgroup_tree(self.cgroup_parent)
        if (
            tree is not None
            and tree.memory_parent is not None
            and tree.pids_parent is not None
            and not reasons
            and not self.cgroup_error
        ):
            return tree, []  # nothing missing (each run looks): no fix to word, no user look-up
        fix = cgroup_fix()
        missing = [{"layer": "cgroups", "reason": r, "fix": fix} for r in reasons]
        if self.cgroup_error:
            missing.insert(0, {"layer": "cgroups", "reason": self.cgroup_error, "fix": fix})
        if tree is None and self.use_cgroups:
            missing.append(
                {
                    "layer": "cgroup-memory",
                    "reason": "no run cgroup: memory is capped per process only (rlimit-data), "
                    "so several processes or shared memory together exceed memory_limit_mb",
                    "fix": fix,
                }
            )
        if tree is not None and tree.memory_parent is None:
            missing.append({"layer": "cgroup-memory", "reason": "no memory cgroup", "fix": fix})
        if tree is not None and tree.pids_parent is None:
            missing.append({"layer": "cgroup-pids", "reason": "no pids cgroup", "fix": fix})
        return tree, missing

    def cgroup_tree(self) -> cgroups.CgroupTree | None:
        """Where runs get their cgroups (the server's own, or the delegated one)."""
        return self._cgroups()[0]

    def hidden_paths(self) -> namespaces.Hidden:
        """The credential folders and files a bwrap run gets empty ones in place of.

        Where they could be is a function of the environment and the home folder
        (jupyter_core's rules among it), kept while both stay the same; whether each
        exists and what it resolves to is looked at on every call, so a folder made,
        removed or re-pointed since the last run is hidden (or not) at once.
        """
        return _existing(self._hidden_candidates(self._home())[1], Lookup())

    def _home(self) -> Path:
        return self.home or Path(self.environ.get("HOME") or Path.home())

    def _hidden_candidates(
        self, home: Path
    ) -> tuple[object, tuple[tuple[str, ...], tuple[str, ...]]]:
        """:meth:`hidden_paths`' candidates (folders, files), worked out again whenever
        the home folder or any environment variable differs from the last call, with
        what they were worked out from (None: the environment changed while it was read)."""
        try:
            key: object = (str(home), _whole(self.environ))
        except RuntimeError:  # another thread changed os.environ meanwhile: work it out
            key = None
        cached = self._candidates  # one read: worker threads call this too
        if key is not None and cached is not None and cached[0] == key:
            return cached
        dirs, files = namespaces.credential_candidates(self.environ, home)
        dirs += jupyter_dirs(self.environ)
        candidates = (tuple(dict.fromkeys(map(str, dirs))), tuple(map(str, files)))
        if key is not None:
            self._candidates = (key, candidates)
        return key, candidates

    def host_view(self, argv: list[str]) -> HostView:
        """What a bwrap run of ``argv`` sees of the host now: :meth:`hidden_paths`, the
        :func:`plan_view` with them, and which file each folder bound or covered is.

        Worked out in full, then kept (per interpreter) while nothing it depends on
        differs: the candidates (home folder and environment), the interpreter's
        folders (``argv[0]``, ``PATH``), and every path the full work looked at, each of
        which is looked at again on each call (:meth:`Lookup.current`: one ``lstat`` a
        path). A credential folder or file made, removed, replaced or re-pointed since,
        in its last component or any before it (a symlinked home folder), is seen at
        once, as by the full work. The answer is shared: not to be changed.
        """
        key, candidates = self._hidden_candidates(self._home())
        interpreters = needed_paths(argv[0]) if argv else []
        name = argv[0] if argv else ""
        kept = self._views.get(name)  # one read: worker threads call this too
        if (
            key is not None
            and kept is not None
            and kept[0] == (candidates, interpreters)
            and kept[1].current()
        ):
            return kept[2]
        lookup = Lookup()
        # From the very candidates and interpreter folders the answer is kept under.
        hidden = _existing(candidates, lookup)
        view = plan_view(argv, hidden, lookup, interpreters)
        bound = (*view.interpreters, *view.cover_dirs, *view.cover_files)
        found = HostView(hidden, view, (repr(view), tuple(lookup.identity(str(p)) for p in bound)))
        if key is not None:
            if len(self._views) >= _VIEWS_KEPT:
                self._views = {}
            self._views[name] = ((candidates, interpreters), lookup, found)
        return found

    # -- the Isolator interface ------------------------------------------------------

    def prepare(
        self,
        argv: list[str],
        *,
        workdir: Path,
        allow_network: bool,
        limits: ResourceLimits,
        inputs: Sequence[StagedInput] = (),
    ) -> Launch:
        """Wrap ``argv`` in the engine, a run cgroup and rlimits available now; ``inputs``
        bound read-only into ``workdir`` (bwrap) or moved there (the other engines)."""
        engine, _ = self._engine()
        if not isinstance(engine, namespaces.Namespaces) or engine.kind != "bwrap":
            move_inputs(inputs, workdir)
            inputs = ()
        if isinstance(engine, nsfree.Engine):
            return self._prepare_walled(engine, argv, workdir, allow_network, limits)
        tool = engine
        tree, _ = self._cgroups()
        chain = tool.confine if tool is not None else None
        # Each bwrap run (and slot) that drops its uid is a host uid of its own: no run
        # can use up the per-uid limits (processes, pipe buffers) of another. As root any
        # uid (nsfree.RUN_IDS); otherwise one of the subordinate range (subids).
        own_uid = nsfree.RUN_IDS.take() if chain is not None and chain.as_root else None
        claim = None
        run: cgroups.CgroupRun | None = None
        try:
            if chain is not None and chain.idmap is not None:
                claim = subids.run_ids(chain.idmap).take()
            if tree is not None:
                cgroups.remove_stale()
                try:
                    run = tree.create(limits)
                except OSError:
                    run = None  # fall back to rlimits for this run, and say so by the layers
        except BaseException:
            if own_uid is not None:
                nsfree.RUN_IDS.give_back(own_uid)
            if claim is not None:
                claim.release()
            raise
        own_ids = claim.ids if claim else (own_uid, own_uid) if own_uid is not None else None
        covered = tree.layers() if run is not None and tree is not None else []
        rlimits = plan_rlimits(
            limits,
            memory="cgroup-memory" not in covered,
            processes="cgroup-pids" not in covered,
            own_uid=own_ids is not None,
        )
        tools = launch_tools()
        layers: list[str] = []
        first = None
        try:
            if tool is not None:
                layers += tool.layers(allow_network=allow_network)
                # The hidden paths are re-checked every time (see host_view).
                found = self.host_view(argv) if tool.kind == "bwrap" else None
                hidden, view = (found.hidden, found.view) if found else (((), ()), None)
                if "hidden-credentials" in layers and view is not None and view.kept:
                    layers.remove("hidden-credentials")  # one holds the interpreter: visible
                if chain is not None and tools is not None:
                    first = stage_steps(chain.shell, rlimits, run, own_uid=own_ids is not None)
                if first is None and claim is not None and chain is not None:
                    # RLIMIT_NPROC set before the run's user namespace counts every task of
                    # the server's user: its tasks now plus the run's allowance.
                    rlimits = plan_rlimits(
                        limits,
                        memory="cgroup-memory" not in covered,
                        processes="cgroup-pids" not in covered,
                        run_uid=claim.uid,
                    )
                argv = tool.wrap(
                    argv,
                    workdir=workdir,
                    allow_network=allow_network,
                    hidden=hidden,
                    disk_mb=limits.disk_mb,
                    view=view,
                    first=first or (),
                    own_ids=own_ids,
                    inputs=inputs,
                )
        except BaseException:
            if run is not None:
                run.cleanup()
            if own_uid is not None:
                nsfree.RUN_IDS.give_back(own_uid)
            if claim is not None:
                claim.release()
            raise
        layers += covered
        layers += rlimits.layers
        layers += self._uncontained_layers(allow_network)
        if claim is not None:
            return subids.ClaimedLaunch(
                list(argv), layers, rlimits, run, tools, staged=first is not None, claim=claim
            )
        return LayeredLaunch(
            list(argv), layers, rlimits, run, tools, staged=first is not None, own_uid=own_uid
        )

    def _uncontained_layers(self, allow_network: bool) -> list[str]:
        """What a run says of what it ran without (accepted by the administrator)."""
        out = []
        if self.refusal() is not None:
            out.append(UNCONTAINED_LAYER)
        elif allow_network and self.refusal(allow_network=True) is not None:
            out.append(HOST_NETWORK_LAYER)
        return out

    def _prepare_walled(
        self,
        engine: nsfree.Engine,
        argv: list[str],
        workdir: Path,
        allow_network: bool,
        limits: ResourceLimits,
    ) -> Launch:
        """A run of the namespace-free engine: the wall, a run cgroup, rlimits, its uid."""
        tree, _ = self._cgroups()
        as_root = os.geteuid() == 0
        run_uid = nsfree.RUN_IDS.take() if as_root else None
        run: cgroups.CgroupRun | None = None
        wall: landlock.Wall | None = None
        try:
            if tree is not None:
                cgroups.remove_stale()
                with contextlib.suppress(OSError):
                    run = cgroups.SPARES.take(tree, limits)
            covered = tree.layers() if run is not None and tree is not None else []
            rlimits = plan_rlimits(
                limits,
                memory="cgroup-memory" not in covered,
                processes="cgroup-pids" not in covered,
                own_uid=run_uid is not None,
            )
            if run_uid is not None:
                nsfree.own_run_folder(workdir, run_uid)
            dirs, files = self.hidden_paths()
            rules, kept = nsfree.fs_rules(argv[0], workdir, [*dirs, *files])
            open_network = allow_network and self.refusal(allow_network=True) is not None
            bpf = engine.bpf_inet if allow_network else engine.bpf_off
            if bpf is None:
                raise OSError("the seccomp filter for network-on runs could not be built")
            wall = landlock.Wall(
                nsfree.SPARES.ruleset(rules, deny_tcp=not allow_network, scoped=True),
                bpf=bpf,
                ids=(run_uid, run_uid) if run_uid is not None else None,
            )
            layers = nsfree.layers(allow_network=allow_network, as_root=as_root)
            if not kept:
                layers.remove("hidden-credentials")  # one holds the interpreter: in view
            layers += covered + rlimits.layers
            if open_network:
                layers.append(HOST_NETWORK_LAYER)
            ahead = functools.partial(_make_ahead, rules, allow_network, tree, limits)
            return WalledLaunch(list(argv), layers, rlimits, run, wall, run_uid, ahead)
        except BaseException:
            if wall is not None:
                wall.close()
            if run is not None:
                run.cleanup()
            if run_uid is not None:
                nsfree.RUN_IDS.give_back(run_uid)
            raise

    def fingerprint(self, argv: list[str], *, allow_network: bool) -> Hashable | None:
        """The bwrap view of ``argv`` (hidden paths, interpreter folders) and, network on,
        the blocked networks, as :meth:`prepare` would make them now.

        On the namespace-free engine: what its wall is made of now
        (:func:`.nsfree.wall_fingerprint`: the hidden paths, the interpreter's folders,
        the rules), and whether runs get a cgroup.

        None (no warm slots) for ``unshare`` and ``none``, or where the bwrap launch
        needs a ``preexec_fn`` (the wall's ``preexec_fn`` has no lock or import to fear
        from a worker thread: see :class:`.landlock.Wall`).
        """
        engine, _ = self._engine()
        if isinstance(engine, nsfree.Engine):
            if self.refusal() is not None:
                return None
            dirs, files = self.hidden_paths()
            tree, _ = self._cgroups()
            wall = nsfree.wall_fingerprint(argv[0], [*dirs, *files])
            return (nsfree.ENGINE, wall, allow_network, tree is not None, os.geteuid())
        tool, _ = self._namespaces()
        if tool is None or tool.kind != "bwrap" or launch_tools() is None:
            return None
        if self.refusal() is not None:
            return None  # nothing is started ahead of a run that may be refused
        nets = blockednets.blocked_networks() if allow_network and tool.egress_error is None else []
        tree, _ = self._cgroups()
        # The view and which folder or file each path is now: one replaced on the host
        # (renamed away and made again, an atomic save) has the same path but is no longer
        # the one a slot covered or bound, and the host's rename took that cover off in it.
        seen = self.host_view(argv).identity
        return (tool.path, seen, tuple(nets), tree is not None)

    def layers(self, *, allow_network: bool = False) -> list[str]:
        """The layers a run gets now (for status); nothing is created."""
        engine, _ = self._engine()
        tree, _ = self._cgroups()
        if isinstance(engine, nsfree.Engine):
            out = nsfree.layers(allow_network=allow_network, as_root=os.geteuid() == 0)
        else:
            out = engine.layers(allow_network=allow_network) if engine is not None else []
        covered = tree.layers() if tree is not None else []
        rlimits = plan_rlimits(
            ResourceLimits(),
            memory="cgroup-memory" not in covered,
            processes="cgroup-pids" not in covered,
            count_tasks=False,
            own_uid=own_uids(engine),
        )
        return out + covered + rlimits.layers + self._uncontained_layers(allow_network)

    def report(self) -> IsolationReport:
        """Layers in force, the mechanism, and each missing layer with its reason and fix."""
        engine, missing = self._engine()
        return enginereport.report(
            engine,
            missing,
            self._cgroups,
            refusal_of=self.refusal,
            layers=self.layers,
            choice=self.choice,
            choice_error=self.choice_error,
        )


def _make_ahead(
    rules: landlock.FsRules,
    allow_network: bool,
    tree: cgroups.CgroupTree | None,
    limits: ResourceLimits,
) -> None:
    """Make what the next namespace-free run like this one takes ready-made: its ruleset
    with every rule but its folder's (:data:`.nsfree.SPARES`), its cgroup
    (:data:`.cgroups.SPARES`) and its folder (:data:`.cleanup.SPARE_DIRS`)."""
    nsfree.SPARES.make_ahead(rules, deny_tcp=not allow_network, scoped=True)
    if tree is not None:
        cgroups.SPARES.make_ahead(tree, limits)
    SPARE_DIRS.make_ahead()


#: The layer ``off`` names when its run is in a cgroup of its own (it limits nothing).
CLEANUP_LAYER = "cgroup-cleanup"


class CleanupIsolator(Isolator):
    """The ``off`` backend's: no isolation and no limits, but a cgroup per run to kill.

    Where a cgroup can be made, each run joins one that limits nothing; at the end of
    the run every process in it dies, including those that left the process group
    (``setsid``, double forks, daemons). Without one, the run's process group and
    its descendants by parent links are killed, which a ``setsid`` + double fork
    escapes. Nothing else of the host is kept from the snippet.
    """

    def _tree(self) -> cgroups.CgroupTree | None:
        return _cgroup_tree(_delegated(os.environ, None)[0])[0] if LINUX else None

    def prepare(
        self,
        argv: list[str],
        *,
        workdir: Path,
        allow_network: bool,
        limits: ResourceLimits,
        inputs: Sequence[StagedInput] = (),
    ) -> Launch:
        """``argv`` as is, joined to a fresh unlimited cgroup when one can be made
        (``inputs`` moved into ``workdir``)."""
        move_inputs(inputs, workdir)
        tree = self._tree()
        cgroup = None
        if tree is not None:
            with contextlib.suppress(OSError):
                cgroup = tree.create(None)
        layers = [CLEANUP_LAYER] if cgroup is not None else []
        return LayeredLaunch(list(argv), layers, RlimitPlan(), cgroup, launch_tools())

    def layers(self, *, allow_network: bool = False) -> list[str]:
        """``cgroup-cleanup`` when runs get a cgroup of their own, else nothing."""
        return [CLEANUP_LAYER] if self._tree() is not None else []


def default_isolator() -> Isolator:
    """The strongest isolator this platform offers (none on Windows)."""
    if sys.platform == "win32":
        return Isolator()
    return LayeredIsolator()
