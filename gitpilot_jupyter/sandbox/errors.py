"""Typed exceptions of the sandbox core.

Every error carries a stable snake_case ``code`` and the HTTP status a REST face
should answer with. Faces translate them in one place each (server handlers,
magic, CLI); the core never formats responses itself.
"""

from __future__ import annotations


class SandboxError(Exception):
    """Base class: a failure the user can act on, never a bug."""

    code = "sandbox_error"
    status = 400

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return self.message


class InvalidRequest(SandboxError):
    """The request is malformed (shape, type, range)."""

    code = "invalid_request"


class UnknownLanguage(SandboxError):
    """A language that is neither canonical nor a known alias."""

    code = "unknown_language"


class UnknownBackend(SandboxError):
    """A backend name outside ``subprocess``, ``matrixlab``, ``off``."""

    code = "unknown_backend"


class InvalidSetting(SandboxError):
    """A settings value that fails validation."""

    code = "invalid_setting"


class EmptyCode(SandboxError):
    """A snippet with nothing to run."""

    code = "empty_code"


class PolicyViolation(SandboxError):
    """A destructive pattern or another policy refusal before launch."""

    code = "policy_violation"


class BackendNotAllowed(SandboxError):
    """The administrator does not allow this backend."""

    code = "backend_not_allowed"
    status = 403


class ContainmentUnavailable(SandboxError):
    """The subprocess backend cannot contain a run on this host, and the administrator
    has not accepted uncontained runs: it is refused before anyone approves it.

    ``code`` is ``containment_unavailable`` (no engine walls the snippet off the user's
    files) or ``network_unavailable`` (network on would share the host's network).
    """

    code = "containment_unavailable"
    status = 409


class PlanNotFound(SandboxError):
    """Unknown, evicted or already consumed plan."""

    code = "plan_not_found"
    status = 404


class RunNotFound(SandboxError):
    """No run with that id is under way (unknown, or already over): nothing to stop."""

    code = "run_not_found"
    status = 404


class RunFileNotFound(SandboxError):
    """No such file of that run's ``out/`` (unknown run or name, expired, or someone else's)."""

    code = "run_file_not_found"
    status = 404


class PlanBlocked(SandboxError):
    """A blocked plan can never be approved."""

    code = "plan_blocked"
    status = 409


class ApprovalError(SandboxError):
    """A run refused by the approval gate; ``code`` says which rule refused it."""

    code = "approval_required"
    status = 403


class SettingNotAllowed(SandboxError):
    """A settings change this caller may not make: not the server's owner, or a change
    that weakens a wall (network on, a longer timeout) the administrator did not allow."""

    code = "setting_not_allowed"
    status = 403


class FileAccessError(SandboxError):
    """A file plan that names a path outside the root or an unreadable file."""

    code = "invalid_file"


class InputRefused(FileAccessError):
    """An input (``--input PATH``) that cannot be handed to a run: missing, outside the
    root, a credential, a symlink out of its tree (``input_symlink``), a FIFO or device."""

    code = "invalid_input"


class ConfirmationRequired(SandboxError):
    """A change that needs an explicit ``confirm`` (switching the backend to ``off``)."""

    code = "confirmation_required"
    status = 409


class SettingsNotSaved(SandboxError):
    """The settings file could not be written (read-only folder, full disk, permissions)."""

    code = "settings_not_saved"
    status = 503


class Busy(SandboxError):
    """The server runs as many runs as its administrator allows (in all, for this user,
    or the memory they commit): try again in ``retry_after`` seconds. Nothing ran,
    and an approval token stays valid."""

    code = "busy"
    status = 429

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class LifecycleDisabled(SandboxError):
    """Mutating lifecycle calls need GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE=1."""

    code = "lifecycle_disabled"
    status = 403


class DockerUnavailable(SandboxError):
    """No Docker engine answers."""

    code = "docker_unavailable"
    status = 503


class BackendUnreachable(SandboxError):
    """The MatrixLab Runner could not be reached."""

    code = "backend_unreachable"
    status = 503


class BackendFailure(SandboxError):
    """The MatrixLab Runner answered with an error."""

    code = "backend_error"
    status = 502


class BackendBusy(SandboxError):
    """The backend has more runs waiting than it queues: nothing was sent; retry later."""

    code = "backend_busy"
    status = 429

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        #: Seconds after which a retry may find room (a REST face's ``Retry-After``).
        self.retry_after = retry_after


class RunOutcomeUnknown(SandboxError):
    """The Runner took the run but did not answer: it may still be running there."""

    code = "run_outcome_unknown"
    status = 504


#: Codes of runs that failed for the machinery's sake, not the snippet's: a batch never
#: records them as done, so a rerun tries them again.
RETRYABLE_CODES = frozenset({BackendUnreachable.code, BackendBusy.code, RunOutcomeUnknown.code})


class ServerUnreachable(SandboxError):
    """The Jupyter server an agent or the CLI was pointed at does not answer."""

    code = "server_unreachable"
    status = 503


class ClusterUnavailable(SandboxError):
    """The Dask cluster of a batch cannot be reached or started (or dask is not installed)."""

    code = "cluster_unavailable"
    status = 503


class ClusterInsecure(SandboxError):
    """A Dask cluster reached without mutual TLS: whoever reaches its scheduler runs code on it."""

    code = "cluster_insecure"
    status = 400


class NotPlanOwner(ApprovalError):
    """An approval token made for another person's plan (under an identity provider with users)."""

    code = "not_plan_owner"
    status = 403


class SessionNotFound(SandboxError):
    """No session of that name is open for this identity (unknown, stopped, lost, or
    another person's: its existence is not disclosed)."""

    code = "session_not_found"
    status = 404


class SessionUnavailable(SandboxError):
    """A session cannot be started here: the engine in force cannot hold one, or the
    interpreter's environment has no ipykernel. The message says why and how to fix it."""

    code = "session_unavailable"
    status = 409


class SessionExists(SandboxError):
    """A session of that name is already open for this identity: restart or stop it."""

    code = "session_exists"
    status = 409
