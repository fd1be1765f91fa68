"""matplotlib's font list, built once by the server and copied into each python run.

A run's ``MPLCONFIGDIR`` is ``.matplotlib`` in its own folder (the display shim's
default, see :mod:`..rich.shim`), new each run: the first ``import matplotlib.pyplot``
of every run scanned the fonts and wrote ``fontlist-vNNN.json`` again. The server
builds that file once, outside any run, with the run's interpreter (a ``HOME`` of its
own, empty as a run's is), in its own cache folder keyed by the interpreter,
matplotlib's version and the font folders' stat; each python run gets a *copy* in its
private folder before it starts (placed by the server where the run folder is the
server's, :data:`HOST_FOLDER_ENGINES`; by bubblewrap's staging shell in its tmpfs): a
run's writes reach only its own copy, and the shared one is never inside a run's wall.
matplotlib still checks that a chosen font's file exists: the fonts it lists (its own
``mpl-data``, ``/usr/share/fonts``) are readable in a run on every engine; a font only
the server's home holds is not listed.

Where the interpreter has no matplotlib, nothing is built or copied.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

log = logging.getLogger(__name__)

#: The run's matplotlib folder, under its ``TMPDIR`` (= its run folder): the shim's.
RUN_CONFIG_DIR = ".matplotlib"
#: The engines whose run folder is the server's own folder (the namespace-free engine,
#: and no engine): the server places the copy there. (bubblewrap's runs start in a
#: fresh tmpfs stage: its staging shell writes the copy, see ``--mpl-fonts``.)
HOST_FOLDER_ENGINES = ("landlock", "none")
#: System font folders matplotlib scans on Linux (its own ``mpl-data`` is added).
SYSTEM_FONT_DIRS = ("/usr/share/fonts", "/usr/local/share/fonts")
#: What the interpreter answers: matplotlib's version and folder, or an empty line.
_PROBE = (
    "import importlib.util as u, importlib.metadata as m\n"
    "s = u.find_spec('matplotlib')\n"
    "print(m.version('matplotlib'), s.submodule_search_locations[0]) if s else print()\n"
)
_BUILD = "import matplotlib.font_manager"
_lock = threading.Lock()


def cache_root() -> Path:
    """The server's own cache folder for the font lists."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "gitpilot-jupyter" / "matplotlib"


@functools.cache
def _matplotlib_of(interpreter: str) -> tuple[str, str] | None:
    """(version, package folder) of the interpreter's matplotlib; None without one."""
    try:
        done = subprocess.run(
            [interpreter, "-I", "-c", _PROBE], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    words = done.stdout.split(maxsplit=1) if done.returncode == 0 else []
    return (words[0], words[1].strip()) if len(words) == 2 else None


def _font_dirs_stat(package: str) -> list[str]:
    """Each font folder and its subfolders' (path, inode, mtime): a font added or
    removed changes its folder's mtime, and so the key."""
    found = []
    for top in (os.path.join(package, "mpl-data", "fonts"), *SYSTEM_FONT_DIRS):
        for path in (top, *_subdirs(top)):
            try:
                stat = os.stat(path)
            except OSError:
                continue
            found.append(f"{path} {stat.st_ino} {stat.st_mtime_ns}")
    return found


def _subdirs(top: str) -> list[str]:
    found = []
    try:
        for entry in os.scandir(top):
            if entry.is_dir(follow_symlinks=False):
                found.append(entry.path)
                found += _subdirs(entry.path)
    except OSError:
        pass
    return found


def shared_font_list(interpreter: str) -> Path | None:
    """The server's font list for ``interpreter``'s matplotlib, built now if it is not
    there yet (once: ~a second); None without matplotlib, or if the build failed."""
    found = _matplotlib_of(interpreter)
    if found is None:
        return None
    version, package = found
    words = [os.path.realpath(interpreter), version, package, *_font_dirs_stat(package)]
    key = hashlib.sha256("\n".join(words).encode()).hexdigest()[:24]
    folder = cache_root() / key
    with _lock:
        lists = sorted(folder.glob("fontlist-v*.json"))
        if lists:
            return lists[-1]
        return _build(interpreter, folder)


def _build(interpreter: str, folder: Path) -> Path | None:
    folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".build-") as work:
        config, home = Path(work, "config"), Path(work, "home")
        config.mkdir()
        home.mkdir()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "MPLCONFIGDIR": str(config),
            "MPLBACKEND": "agg",
        }
        try:
            subprocess.run(
                [interpreter, "-I", "-c", _BUILD],
                env=env,
                cwd=work,
                capture_output=True,
                timeout=120,
                check=True,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("matplotlib's font list could not be built: %s", exc)
            return None
        built = sorted(config.glob("fontlist-v*.json"))
        if not built:
            return None
        os.chmod(config, 0o700)
        # Whole, at once: a reader sees it all or nothing (OSError: another built it).
        with contextlib.suppress(OSError):
            os.replace(config, folder)
    lists = sorted(folder.glob("fontlist-v*.json"))
    return lists[-1] if lists else None


def place_font_list(interpreter: str, workdir: Path) -> bool:
    """Copy the shared font list into the run's own ``.matplotlib`` (owned as the run
    folder is: a run's writes there touch only its copy); False when there is none."""
    shared = shared_font_list(interpreter)
    if shared is None:
        return False
    config = workdir / RUN_CONFIG_DIR
    config.mkdir(mode=0o700, exist_ok=True)
    copy = config / shared.name
    shutil.copyfile(shared, copy)
    owner = os.stat(workdir)
    if owner.st_uid != os.geteuid():
        for path in (config, copy):
            os.chown(path, owner.st_uid, owner.st_gid, follow_symlinks=False)
    return True
