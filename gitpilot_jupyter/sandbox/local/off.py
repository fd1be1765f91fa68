"""What the ``off`` backend means, said once for every face.

``off`` (pass-through) runs a snippet as a plain child process of the server or
kernel: no namespaces, no resource limits, the host's files and network, as
the user who started Jupyter. Only the policy (timeout, output cap, secret
scrubbing, destructive patterns) still applies. So:

* every ``off`` plan carries :data:`OFF_WARNING` (high severity) and never says
  "network disabled": its network is whatever the host allows;
* switching the backend to ``off`` asks for a confirmation in every face, with
  :func:`off_confirmation` as the question, and the core itself refuses the switch
  unless the caller says it was confirmed (:func:`check_off_confirmed`): a face sends
  ``confirm`` only after its user said yes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..errors import ConfirmationRequired
from ..records import PlanWarning

OFF_BACKEND = "off"

#: The one sentence every face shows about ``off``.
OFF_RISK = "no isolation: runs on the host as you, network not blocked"

#: The high-severity warning on every ``off`` plan (the scanner's warning shape).
OFF_WARNING: PlanWarning = {
    "severity": "high",
    "label": "no isolation",
    "detail": "runs on the host as you, network not blocked",
}

#: What teacher-facing text calls ``off`` (the lab and the panel say "Pass-through").
OFF_LABEL = "pass-through (no sandbox)"

#: The plan's network check on ``off``: nothing blocks the network there.
OFF_NETWORK_CHECK = "network not blocked (pass-through: no sandbox)"

#: The plan's line on the user's files on ``off``: nothing hides them there.
OFF_HOME_CHECK = (
    "your home folder, ~/.ssh and the server's secret files NOT hidden (pass-through: no sandbox)"
)


def is_off(backend: str | None) -> bool:
    """True for the pass-through backend."""
    return backend == OFF_BACKEND


def network_for(backend: str, requested: bool) -> bool:
    """The network a run really has: on ``off`` always the host's, else what was asked."""
    return True if is_off(backend) else requested


def off_confirmation(
    changes: Mapping[str, object],
    current_backend: str | None,
    allowed: Iterable[str] | None = None,
) -> str | None:
    """The question to ask before saving ``changes``, or None when no confirmation is due.

    Due when the changes switch the backend to ``off`` from anything else, and ``off``
    is among the ``allowed`` backends (status' ``allowed_backends``; None: not known).
    Where it is not allowed nobody is asked: the save is refused with how to allow it.
    """
    if not is_off(str(changes.get("backend", ""))) or is_off(current_backend):
        return None
    if allowed is not None and OFF_BACKEND not in allowed:
        return None
    return (
        f"Switch the sandbox backend to off? {OFF_RISK[0].upper()}{OFF_RISK[1:]}: "
        "snippets can read and change your files, reach your network and the Jupyter "
        "server, and run without limits."
    )


#: How a caller confirms the switch (said in the refusal).
CONFIRM_HOW = (
    'Nothing was saved. Ask the user, then send the change again with "confirm": true '
    "(jupyter sandbox config --set backend=off asks, or takes --yes)."
)


def check_off_confirmed(
    changes: Mapping[str, object], current_backend: str | None, confirm: bool
) -> None:
    """Refuse switching the backend to ``off`` unless ``confirm`` says the user agreed.

    Raises :class:`~gitpilot_jupyter.sandbox.errors.ConfirmationRequired` (409,
    ``confirmation_required``) with the question and how to confirm; nothing is saved.
    """
    question = off_confirmation(changes, current_backend)
    if question is not None and confirm is not True:
        raise ConfirmationRequired(f"{question} {CONFIRM_HOW}")
