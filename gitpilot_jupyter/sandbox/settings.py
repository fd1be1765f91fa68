"""Sandbox settings: the file, validation, env precedence, masking, atomic writes.

The file is ``$GITPILOT_CONFIG_DIR/settings.json`` (default ``~/.gitpilot``); the
sandbox owns its ``"sandbox"`` key and preserves every other top-level key.
Precedence at every call: explicit argument > environment > file > default.
Only what the user set is ever written: values supplied by the environment
(a token above all) never reach the disk.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import threading
import time
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from .backend import DEFAULT_DISK_MB
from .display import escape_text, needs_escape
from .errors import InvalidRequest, InvalidSetting, SettingsNotSaved, UnknownBackend
from .rich import bundles

BACKENDS = ("matrixlab", "off", "subprocess")
DEFAULT_BACKEND = "subprocess"
#: The backends allowed where the administrator names none: ``off`` (no isolation) is
#: never among them, the administrator lists it to allow it.
DEFAULT_ALLOWED_BACKENDS = ("subprocess", "matrixlab")
#: The administrator's allowed backends for a process without a server trait (the CLI,
#: a kernel on its own), and a server's when ``c.SandboxApp.allowed_backends`` is unset.
ALLOWED_BACKENDS_ENV = "GITPILOT_SANDBOX_ALLOWED_BACKENDS"
MAX_TIMEOUT_SEC = 600
#: A run's timeout when neither the caller nor the settings file names one.
DEFAULT_TIMEOUT_SEC = 120

#: env var -> settings field, in the order that decides ``env_override``.
ENV_VARS = {
    "GITPILOT_SANDBOX": "backend",
    "GITPILOT_MATRIXLAB_URL": "matrixlab_url",
    "GITPILOT_MATRIXLAB_TOKEN": "matrixlab_token",
    "GITPILOT_MATRIXLAB_IMAGE": "matrixlab_image",
}
CONFIG_DIR_ENV = "GITPILOT_CONFIG_DIR"
#: What every settings UI says under the token field (the lab's panel.ts has the same words).
TOKEN_NOTE = (
    "Write-only: a saved token is never shown again. It is only sent to the URL it was "
    "saved with: saving a new URL clears it, and Test connection of an unsaved URL sends "
    "no saved token."
)

#: The whole-number settings' bounds, both included.
INT_RANGES = {
    "timeout_sec": (1, MAX_TIMEOUT_SEC),
    "memory_limit_mb": (16, 65536),
    "max_processes": (8, 4096),
    "max_file_size_mb": (1, 65536),
    "disk_limit_mb": (16, 65536),
    "max_display_item_mb": (1, 64),
    "max_display_run_mb": (1, 512),
    "max_display_outputs": (1, 10000),
}


@dataclass(frozen=True)
class SandboxSettings:
    """The sandbox settings as stored under the ``"sandbox"`` key (frozen: one object
    is shared by every call while the file and the environment stay the same)."""

    backend: str = field(
        default=DEFAULT_BACKEND,
        metadata={
            "help": "The backend that runs snippets. `off` is pass-through: **no isolation, "
            "runs on the host as you, network not blocked**; every `off` plan carries that "
            "high-severity warning, and switching to it asks first in the CLI, `%sandbox config` "
            "and the settings panels."
        },
    )
    matrixlab_url: str = field(
        default="http://localhost:8765",
        metadata={"help": "The MatrixLab Runner's address: an `http://` or `https://` URL."},
    )
    matrixlab_token: str = field(
        default="",
        metadata={
            "help": "The Runner's token. Write-only: never returned by any API, UI or log; "
            '`""` clears it, and so does a new `matrixlab_url` saved without one.'
        },
    )
    matrixlab_image: str = field(
        default="", metadata={"help": 'The Runner\'s image; `""` = its per-language default.'}
    )
    allow_network: bool = field(
        default=False, metadata={"help": "Whether a run may reach the network."}
    )
    timeout_sec: int = field(
        default=DEFAULT_TIMEOUT_SEC,
        metadata={"help": "A run's timeout in seconds, when the caller names none."},
    )
    memory_limit_mb: int = field(
        default=1024, metadata={"help": "The memory limit of a `subprocess` run, in MiB."}
    )
    max_processes: int = field(
        default=256, metadata={"help": "The process limit of a `subprocess` run."}
    )
    max_file_size_mb: int = field(
        default=128,
        metadata={"help": "The largest file a `subprocess` run may write, in MiB."},
    )
    disk_limit_mb: int = field(
        default=DEFAULT_DISK_MB,
        metadata={
            "help": "The size cap of a `subprocess` run's writable space (run folder, `/tmp`, "
            "`/dev/shm`), in MiB, with 64 inodes per MiB; shown in every plan."
        },
    )
    max_display_item_mb: int = field(
        default=bundles.DEFAULT_ITEM_MB,
        metadata={
            "help": "The largest display output (a figure, an image, HTML) a run may return, "
            "in MiB as sent (an image's base64 text); a larger one is dropped with a note. "
            "Shown in every plan."
        },
    )
    max_display_run_mb: int = field(
        default=bundles.DEFAULT_RUN_MB,
        metadata={"help": "The display outputs of one run together, in MiB."},
    )
    max_display_outputs: int = field(
        default=bundles.DEFAULT_OUTPUTS,
        metadata={"help": "How many display outputs one run may return."},
    )

    def masked(self) -> dict[str, Any]:
        """The settings as any API, UI or log may show them: the token replaced by ``has_token``."""
        data = asdict(self)
        data.pop("matrixlab_token")
        data["has_token"] = bool(self.matrixlab_token)
        return data


FIELD_NAMES = tuple(f.name for f in fields(SandboxSettings))


def check_backend(value: object) -> str:
    """Validate a backend name; the message lists the accepted ones."""
    if not isinstance(value, str) or value not in BACKENDS:
        raise UnknownBackend(f"unknown sandbox backend {value!r}; expected one of {list(BACKENDS)}")
    return value


def allowed_backends_from_env(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The backends :data:`ALLOWED_BACKENDS_ENV` lists (comma- or space-separated; names
    that are no backend are ignored), else :data:`DEFAULT_ALLOWED_BACKENDS`."""
    raw = (os.environ if environ is None else environ).get(ALLOWED_BACKENDS_ENV, "")
    names = tuple(dict.fromkeys(n for n in re.split(r"[\s,]+", raw) if n in BACKENDS))
    return names or DEFAULT_ALLOWED_BACKENDS


def how_to_allow(backend: str, allowed: Iterable[str]) -> str:
    """How the administrator allows ``backend`` besides ``allowed`` (said in each refusal)."""
    names = [*allowed, backend]
    return (
        f"the administrator allows it: c.SandboxApp.allowed_backends = {names} on a Jupyter "
        f"server, {ALLOWED_BACKENDS_ENV}={','.join(names)} for the CLI or a kernel on its own"
    )


def _check_one_word(key: str, value: str) -> None:
    """Refuse whitespace and control, format or bidi characters inside a URL, token or image.

    They would split an HTTP header or a command line, or hide part of the value
    from whoever reads it. The token's value is never echoed.
    """
    bad = [char for char in value.strip() if char.isspace() or needs_escape(char)]
    if bad:
        shown = "" if key == "matrixlab_token" else f", got {value!r}"
        raise InvalidSetting(
            f"{key} must not contain spaces or control characters "
            f"(found {escape_text(bad[0]) if not bad[0].isspace() else repr(bad[0])}){shown}"
        )


def validate_setting(key: str, value: object) -> object:
    """Validate one setting; return the value to store. Raises :class:`InvalidSetting`."""
    if key not in FIELD_NAMES:
        raise InvalidSetting(f"unknown setting {key!r}; expected one of {sorted(FIELD_NAMES)}")
    if key == "backend":
        return check_backend(value)
    if key == "matrixlab_url":
        if not isinstance(value, str):
            raise InvalidSetting("matrixlab_url must be a string")
        _check_one_word(key, value)
        parsed = urlparse(value.strip())
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise InvalidSetting(f"matrixlab_url must be an http:// or https:// URL, got {value!r}")
        return value.strip().rstrip("/")
    if key in ("matrixlab_token", "matrixlab_image"):
        if not isinstance(value, str):
            raise InvalidSetting(f"{key} must be a string")
        _check_one_word(key, value)
        return value.strip()
    if key == "allow_network":
        if not isinstance(value, bool):
            raise InvalidSetting("allow_network must be true or false")
        return value
    low, high = INT_RANGES[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidSetting(f"{key} must be an integer between {low} and {high}")
    if not low <= value <= high:
        raise InvalidSetting(f"{key} must be between {low} and {high}, got {value}")
    return value


#: Words a flag (an env var, a ``KEY=VALUE`` boolean) reads as true or false.
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


def parse_flag(text: str | None) -> bool | None:
    """``True`` / ``False`` for the flag words (any case, trimmed); ``None`` for anything else."""
    lowered = (text or "").strip().lower()
    if lowered in TRUE_WORDS:
        return True
    if lowered in FALSE_WORDS:
        return False
    return None


def env_flag(environ: Mapping[str, str], name: str, *, default: bool) -> bool:
    """The boolean env var ``name``: its flag word, else ``default`` (unset or not a flag word)."""
    value = parse_flag(environ.get(name))
    return default if value is None else value


def parse_setting(key: str, text: str) -> object:
    """Parse ``KEY=VALUE`` text (CLI, magic) into a typed value, then validate it."""
    if key not in FIELD_NAMES:
        return validate_setting(key, text)
    default = getattr(SandboxSettings(), key)
    value: object = text
    if isinstance(default, bool):
        flag = parse_flag(text)
        value = text if flag is None else flag
    elif isinstance(default, int):
        with contextlib.suppress(ValueError):
            value = int(text.strip())
    return validate_setting(key, value)


def parse_assignments(items: Iterable[str], *, what: str) -> dict[str, object]:
    """``KEY=VALUE`` words (``--set``, ``%sandbox config``) as typed, validated settings.

    Nothing is returned unless every word is valid, so nothing is saved half-way.
    """
    changes: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise InvalidRequest(f"{what} takes KEY=VALUE, got {item!r}")
        changes[key.strip()] = parse_setting(key.strip(), value)
    return changes


@dataclass(frozen=True)
class EffectiveSettings:
    """Settings as they apply to the next call, with where they came from.

    Frozen: :meth:`SettingsStore.effective` hands the same object to every call while
    the file and the environment it was made from stay the same.
    """

    settings: SandboxSettings
    env_override: str | None = None
    env_error: str | None = None
    settings_error: str | None = None
    from_env: tuple[str, ...] = ()


def _unpin_env_token(
    values: dict[str, Any], persisted: Mapping[str, Any], from_env: list[str]
) -> str | None:
    """Keep the environment's MatrixLab token to the URL it was given for; the error, if any.

    ``GITPILOT_MATRIXLAB_TOKEN`` goes only to ``GITPILOT_MATRIXLAB_URL`` (which the file
    cannot override), or, with that unset, to the default URL: a URL someone saved in
    the file gets the file's own token (saved with it), never the environment's.
    """
    if "matrixlab_token" not in from_env or "matrixlab_url" in from_env:
        return None
    pinned = SandboxSettings.matrixlab_url
    saved = values.get("matrixlab_url", pinned)
    if saved == pinned:
        return None
    from_env.remove("matrixlab_token")
    values["matrixlab_token"] = persisted.get("matrixlab_token", "")
    if values["matrixlab_token"]:
        return None  # that URL has a token of its own: nothing to say
    return (
        f"GITPILOT_MATRIXLAB_TOKEN: sent only to the URL given with it "
        f"(GITPILOT_MATRIXLAB_URL, else {pinned}), not to the saved matrixlab_url {saved}; "
        "set GITPILOT_MATRIXLAB_URL beside the token"
    )


class SettingsStore:
    """Reads and writes ``settings.json``; every read looks at the file and env anew
    (the file's content is parsed again only when the file changed)."""

    _lock = threading.Lock()
    #: How long after its last change a file's content is first kept (see :meth:`persisted`).
    unsettled_ns = 2_000_000_000

    def __init__(
        self, config_dir: str | Path | None = None, environ: Mapping[str, str] | None = None
    ) -> None:
        self._config_dir = Path(config_dir) if config_dir else None
        self._environ = environ
        #: (the file's signature, its valid values, its error): see :meth:`persisted`.
        self._kept: tuple[Hashable, dict[str, Any], str | None] | None = None
        #: (the file's signature and the environment's values, the result): see :meth:`effective`.
        self._kept_effective: tuple[Hashable, EffectiveSettings] | None = None

    @property
    def environ(self) -> Mapping[str, str]:
        """The environment consulted (``os.environ`` unless one was given)."""
        return os.environ if self._environ is None else self._environ

    @property
    def config_dir(self) -> Path:
        """The settings folder: explicit > ``GITPILOT_CONFIG_DIR`` > ``~/.gitpilot``."""
        if self._config_dir is not None:
            return self._config_dir
        env_dir = self.environ.get(CONFIG_DIR_ENV, "").strip()
        return Path(env_dir).expanduser() if env_dir else Path.home() / ".gitpilot"

    @property
    def path(self) -> Path:
        """The settings file."""
        return self.config_dir / "settings.json"

    def _read_document(self) -> tuple[dict[str, Any], str | None]:
        """The whole file as a dict, and an error text when it could not be used."""
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}, None
        except OSError as exc:
            return {}, f"cannot read {self.path}: {exc.strerror or exc}"
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            return {}, f"{self.path} is not valid JSON ({exc}); using defaults"
        if not isinstance(doc, dict):
            return {}, f"{self.path} does not hold a JSON object; using defaults"
        return doc, None

    def persisted(self) -> tuple[dict[str, Any], str | None]:
        """The valid user-set values of the ``"sandbox"`` key, and a settings error if any.

        Read, parsed and validated again only when the file is another one than last
        time (path, device, inode, size, modification and change times): each run
        reads the settings several times. A file changed less than
        :attr:`unsettled_ns` before it was read is never kept (a write within the same
        clock tick would leave its times as they were), so every change is seen at once.
        """
        _, values, error = self._signed()
        return dict(values), error

    def _signed(self) -> tuple[Hashable | None, Mapping[str, Any], str | None]:
        """:meth:`persisted`'s values (not to be changed), with the signature that stands
        for them while the file stays as it is; None when they must not be kept."""
        path = self.path
        try:
            info = os.stat(path)
        except FileNotFoundError:
            # No file: the defaults, until a stat finds one (nothing to read, nothing stale).
            return (str(path), None), {}, None
        except OSError:
            values, error = self._persisted()  # the error reading it gives
            return None, values, error
        signature = (
            str(path),
            info.st_dev,
            info.st_ino,
            info.st_size,
            info.st_mtime_ns,
            info.st_ctime_ns,
        )
        kept = self._kept  # one read: threads share the store
        if kept is not None and kept[0] == signature:
            return signature, kept[1], kept[2]
        values, error = self._persisted()
        if time.time_ns() - max(info.st_mtime_ns, info.st_ctime_ns) <= self.unsettled_ns:
            return None, values, error
        self._kept = (signature, dict(values), error)
        return signature, values, error

    def _persisted(self) -> tuple[dict[str, Any], str | None]:
        doc, error = self._read_document()
        section = doc.get("sandbox", {})
        if not isinstance(section, dict):
            return {}, error or f'{self.path}: "sandbox" is not an object; using defaults'
        values: dict[str, Any] = {}
        bad: list[str] = []
        for key, value in section.items():
            try:
                values[key] = validate_setting(key, value)
            except (InvalidSetting, UnknownBackend):
                bad.append(key)
        if bad and error is None:
            error = f"{self.path}: ignored invalid value(s) for {', '.join(sorted(bad))}"
        return values, error

    def effective(self) -> EffectiveSettings:
        """Defaults < file < environment, with ``env_override`` and errors reported.

        Worked out again only when the file (see :meth:`persisted`) or one of the
        environment variables read (:data:`ENV_VARS`) differs from last time; else
        the same (frozen) object as last time.
        """
        signature, persisted, settings_error = self._signed()
        env = self.environ
        raw_env = tuple(env.get(var, "") for var in ENV_VARS)
        key = (signature, raw_env)
        kept = self._kept_effective  # one read: threads share the store
        if signature is not None and kept is not None and kept[0] == key:
            return kept[1]
        values = dict(persisted)
        from_env: list[str] = []
        env_override: str | None = None
        env_error: str | None = None
        for (var, key_name), value in zip(ENV_VARS.items(), raw_env, strict=True):
            raw = value.strip()
            if not raw:
                continue
            if env_override is None:
                env_override = var
            if key_name == "backend" and raw not in BACKENDS:
                env_error = (
                    f"{var}={raw!r} is not a sandbox backend; expected one of {list(BACKENDS)}"
                )
                continue
            try:
                values[key_name] = validate_setting(key_name, raw)
            except InvalidSetting as exc:
                env_error = f"{var}: {exc}"
                continue
            from_env.append(key_name)
        unpinned = _unpin_env_token(values, persisted, from_env)
        env_error = env_error or unpinned
        effective = EffectiveSettings(
            settings=SandboxSettings(**values),
            env_override=env_override,
            env_error=env_error,
            settings_error=settings_error,
            from_env=tuple(from_env),
        )
        if signature is not None:
            self._kept_effective = (key, effective)
        return effective

    def update(self, changes: Mapping[str, object]) -> SandboxSettings:
        """Validate ``changes`` and persist them; other keys and top-level entries are kept.

        Nothing is written when any value is invalid. An empty ``matrixlab_token``
        clears the saved token, and so does a new ``matrixlab_url`` given without a
        token (the token is only ever sent to the URL it was saved with). Returns the
        persisted (not env-merged) settings.
        """
        clean = {key: validate_setting(key, value) for key, value in changes.items()}
        try:
            with self._locked():
                doc, error = self._read_document()
                if error and self.path.exists():
                    self._keep_bad_copy()
                    doc = {}
                section = doc.get("sandbox")
                current = dict(section) if isinstance(section, dict) else {}
                if self._moves_token(current, clean):
                    # The write-only token belongs to the Runner it was saved for: a new
                    # URL without a new token must not carry it to another host.
                    current.pop("matrixlab_token", None)
                current.update(clean)
                if current.get("matrixlab_token") == "":
                    current.pop("matrixlab_token")
                doc["sandbox"] = current
                self._write_atomic(doc)
        except OSError as exc:
            # A read-only folder or a full disk is the machine's state, not a bug: say so.
            raise SettingsNotSaved(
                f"could not save the settings to {self.path}: {exc.strerror or exc}; "
                "nothing was changed"
            ) from None
        values, _ = self.persisted()
        return SandboxSettings(**values)

    @staticmethod
    def _moves_token(current: Mapping[str, Any], clean: Mapping[str, object]) -> bool:
        """True when ``clean`` points the saved token at another URL without giving a token."""
        if "matrixlab_url" not in clean or "matrixlab_token" in clean:
            return False
        try:
            saved = validate_setting(
                "matrixlab_url", current.get("matrixlab_url", SandboxSettings.matrixlab_url)
            )
        except InvalidSetting:
            saved = None
        return bool(current.get("matrixlab_token")) and saved != clean["matrixlab_url"]

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialise writers in this process and, where ``fcntl`` exists, across processes."""
        self.config_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        with self._lock, open(self.config_dir / ".settings.lock", "a", encoding="utf-8") as fh:
            try:
                import fcntl
            except ImportError:  # pragma: no cover - Windows
                yield
                return
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _keep_bad_copy(self) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        with contextlib.suppress(OSError):
            os.replace(self.path, self.path.with_name(f"settings.json.bad-{stamp}"))

    def _write_atomic(self, doc: Mapping[str, Any]) -> None:
        folder = self.config_dir
        with contextlib.suppress(OSError):
            os.chmod(folder, 0o700)
        fd, tmp = tempfile.mkstemp(prefix=".settings.", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(doc, fh, indent=2, sort_keys=True)
                fh.write("\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
