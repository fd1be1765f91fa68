"""Linux namespaces for a run: bubblewrap (preferred) or ``unshare``.

Each tool is probed once with the exact options a run uses; the probe result
is cached per executable path, so a re-check is only a ``PATH`` lookup.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..backend import DEFAULT_DISK_MB
from ..executables import which
from . import bwrapplan
from .bundled import bundled_bwrap
from .confine import (
    CGROUP_NS,
    TOOLS_FIX,
    Confinement,
    View,
    confinement,
    inside,
    needed_paths,
    plan_view,
    seccomp_filter,
    without_idmap,
)

#: Folders (and files) holding the user's credentials, relative to the home folder.
CREDENTIAL_DIRS = (".gitpilot", ".ssh", ".aws", ".config/gcloud", ".docker", ".kube", ".gnupg")
CREDENTIAL_FILES = (".netrc", ".git-credentials", ".pypirc")

BWRAP_FIX = (
    "install bubblewrap (Debian/Ubuntu: sudo apt-get install bubblewrap; "
    "Fedora: sudo dnf install bubblewrap)"
)
USERNS_FIX = (
    "allow unprivileged user namespaces (sudo sysctl -w kernel.unprivileged_userns_clone=1; "
    "on Ubuntu 24.04+: sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0), "
    "or run the server as root"
)
_PROBE_TIMEOUT = 10


def runtime_dirs(environ: Mapping[str, str], home: Path) -> list[Path]:
    """The Jupyter runtime folders (server tokens, kernel connection files)."""
    found = []
    if environ.get("JUPYTER_RUNTIME_DIR"):
        found.append(Path(environ["JUPYTER_RUNTIME_DIR"]))
    data = environ.get("JUPYTER_DATA_DIR") or os.path.join(
        environ.get("XDG_DATA_HOME") or str(home / ".local" / "share"), "jupyter"
    )
    found.append(Path(data) / "runtime")
    if environ.get("XDG_RUNTIME_DIR"):
        found.append(Path(environ["XDG_RUNTIME_DIR"]) / "jupyter")
    if environ is os.environ:
        try:  # jupyter_core knows its platform rules (JUPYTER_PLATFORM_DIRS, ...)
            from jupyter_core.paths import jupyter_runtime_dir

            found.append(Path(jupyter_runtime_dir()))
        except ImportError:
            pass
    return found


#: (folders, files) to hide from a run.
Hidden = tuple[Sequence[Path], Sequence[Path]]


def credential_candidates(environ: Mapping[str, str], home: Path) -> tuple[list[Path], list[Path]]:
    """Where credential folders and files would be for ``environ`` and ``home``, existing
    or not (a function of those two alone: nothing on disk is looked at)."""
    dirs = [home / name for name in CREDENTIAL_DIRS] + runtime_dirs(environ, home)
    if environ.get("GITPILOT_CONFIG_DIR"):
        dirs.append(Path(environ["GITPILOT_CONFIG_DIR"]).expanduser())
    return dirs, [home / name for name in CREDENTIAL_FILES]


def credential_paths(environ: Mapping[str, str], home: Path) -> Hidden:
    """Existing credential folders and files to hide, resolved and without duplicates."""
    dirs, files = credential_candidates(environ, home)
    real_dirs = sorted({p.resolve() for p in dirs if p.is_dir()})
    real_files = sorted({p.resolve() for p in files if p.is_file()})
    return real_dirs, real_files


def hideable(dirs: Sequence[Path], argv: list[str], workdir: Path) -> list[Path]:
    """The credential folders that can be hidden: never one the run needs (a venv in it)."""
    needed = [*(needed_paths(argv[0]) if argv else []), workdir]
    return [d for d in dirs if not any(inside(p, d) for p in needed)]


#: The layers a bwrap run gets whatever the host (the chain fails as a whole otherwise).
BWRAP_LAYERS = ["userns", "non-root", "fs-allowlist", "ro-root", "private-tmp"]


@dataclass
class Namespaces:
    """A working namespace tool and how to wrap a command with it."""

    kind: str  # "bwrap" or "unshare"
    path: str
    user_ns: bool = False  # unshare needs --user --map-root-user when not root
    confine: Confinement | None = None  # bwrap: the launch chain (see .confine)
    #: bwrap: why a network-on run cannot get its own stack here (None: it can).
    egress_error: str | None = "not probed"

    def layers(self, *, allow_network: bool) -> list[str]:
        """The layers a run wrapped by this tool gets."""
        out = ["pidns", "ipcns", "utsns"]
        if not allow_network:
            out.append("netns")
        elif self.kind == "bwrap" and self.egress_error is None:
            out.append("egress-only")
        if self.kind == "bwrap":
            if CGROUP_NS:
                out.append("cgroupns")
            out[:0] = list(BWRAP_LAYERS)
            if self.confine is not None and self.confine.drops:
                # No groups, and a host uid of the run's own (root: .nsfree.RUN_IDS; an
                # id map: .subids), which LayeredIsolator.prepare takes for each run.
                out[2:2] = ["no-groups", "own-uid"]
            out += ["hidden-credentials", "proc-sys-ro"]
            if seccomp_filter()[0] is not None:
                out.append("seccomp")
            out.append("disk-cap")
        return out

    def wrap(
        self,
        argv: list[str],
        *,
        workdir: Path,
        allow_network: bool,
        hidden: Hidden = ((), ()),
        disk_mb: int = DEFAULT_DISK_MB,
        view: View | None = None,
        first: Sequence[str] = (),
        own_ids: tuple[int, int] | None = None,
    ) -> list[str]:
        """``argv`` wrapped to run in the namespaces, with ``workdir`` as its cwd.

        ``hidden`` (folders, files) are covered by empty ones (bwrap only);
        ``disk_mb`` caps the run's writable space (bwrap only); ``view`` is the
        :func:`plan_view` of ``argv`` and ``hidden`` when the caller has it already;
        ``first``: shell lines the bwrap chain's staging shell runs before anything
        else (see :func:`.bwrapplan.command`; bwrap only); ``own_ids``: the host ids of
        this run alone (bwrap only, a chain that drops: see :func:`.bwrapplan.command`).
        """
        if self.kind == "bwrap":
            assert self.confine is not None
            return bwrapplan.command(
                self.confine,
                argv,
                workdir=workdir,
                allow_network=allow_network,
                view=view if view is not None else plan_view(argv, hidden),
                disk_mb=disk_mb,
                bpf=seccomp_filter()[0],
                egress=self.egress_error is None,
                first=first,
                own_ids=own_ids,
            )
        assert not first, "only the bwrap chain has a staging shell"
        cmd = [self.path]
        if self.user_ns:
            cmd += ["--user", "--map-root-user"]
        cmd += ["--pid", "--fork", "--kill-child", "--mount-proc", "--ipc", "--uts"]
        if not allow_network:
            cmd.append("--net")
        return [*cmd, "--", *argv]


def _probe(tool: Namespaces, *, allow_network: bool = False) -> str | None:
    """Run ``true`` the way a run would; the error text when that fails."""
    true = shutil.which("true") or "/bin/true"
    with tempfile.TemporaryDirectory(prefix="gitpilot-probe-") as workdir:
        argv = tool.wrap([true], workdir=Path(workdir), allow_network=allow_network)
        try:
            proc = subprocess.run(
                argv, capture_output=True, text=True, timeout=_PROBE_TIMEOUT, check=False
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return str(exc)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        return lines[-1] if lines else f"exit status {proc.returncode}"
    return None


_CACHE: dict[tuple[str, str], tuple[Namespaces | None, str | None]] = {}


def detect(kind: str) -> tuple[Namespaces | None, dict[str, str] | None]:
    """A working ``kind`` tool, or None and ``{"layer", "reason", "fix"}`` saying why not.

    The probe runs once per executable path; later calls only look the tool up on PATH.
    """
    path = which(kind)
    bundled_error = None
    if path is None and kind == "bwrap":
        path, bundled_error = bundled_bwrap()
    if path is None:
        fix = BWRAP_FIX if kind == "bwrap" else "install util-linux (it provides unshare)"
        reason = f"{kind} is not installed (not on PATH)"
        if bundled_error is not None:
            reason += f", and the bundled one is not used: {bundled_error}"
        return None, {"layer": kind, "reason": reason, "fix": fix}
    key = (kind, path)
    if key not in _CACHE:
        candidates = [Namespaces(kind, path)]
        if kind == "unshare" and os.geteuid() != 0:
            candidates = [Namespaces(kind, path, user_ns=True)]
        tool, error = None, None
        if kind == "bwrap":
            chain, missing = confinement(path)
            if chain is None:
                return None, {"layer": kind, "reason": str(missing), "fix": TOOLS_FIX}
            candidates = [Namespaces(kind, path, confine=chain)]
        for cand in candidates:
            error = _probe(cand)
            if error is not None and cand.confine is not None and cand.confine.idmap:
                # The user namespace through newuidmap failed (a range newuidmap refuses,
                # a non-setuid newuidmap): runs keep the groups, and status says why.
                fallback = without_idmap(cand.confine, f"newuidmap/newgidmap failed: {error}")
                cand = Namespaces(kind, path, confine=fallback)
                error = _probe(cand)
            if error is None:
                tool = cand
                break
        if tool is not None and tool.confine is not None:
            if tool.confine.net_tools is None:
                tool.egress_error = "slirp4netns, nsenter or ip is not installed"
            else:
                tool.egress_error = None  # the probe below runs the network-on chain
                tool.egress_error = _probe(tool, allow_network=True)
        _CACHE[key] = (tool, error)
    tool, error = _CACHE[key]
    if tool is None:
        return None, {
            "layer": kind,
            "reason": f"{kind} is installed but cannot create namespaces here: {error}",
            "fix": USERNS_FIX,
        }
    return tool, None
