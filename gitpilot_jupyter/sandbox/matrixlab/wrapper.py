"""Our own clock inside the Runner's container: the command every run is sent as.

The Runner's timeout also counts starting and stopping the container (0.3-0.8 s
measured), its ``timed_out`` flag is set by any exit 124 or any ``TIMEOUT`` on
stderr, and when a run that wrote to stderr hits it the Runner answers 500 and
drops all output. So the backend gives the Runner a larger budget and runs the
snippet under ``timeout -s KILL <its own seconds>`` inside the container, as the
local backend kills the process group at its deadline. After the snippet, the
wrapper writes one line to stderr with a per-run random marker, the exit status
and the microseconds the snippet itself ran; :func:`read_report` takes it off.
A run that timed out is one that was killed (137) or reported 124 by ``timeout``
*and* ran its whole time: a snippet exiting 124 early, or writing ``TIMEOUT``,
did not time out.

The wrapper needs bash 5 (``$EPOCHREALTIME``) and coreutils ``timeout``, as the
Runner's sandbox images (Debian bookworm) have.
"""

from __future__ import annotations

import re
import secrets
import shlex
from dataclasses import dataclass

#: Seconds the Runner gets beyond the snippet's own timeout: container start and stop.
START_ALLOWANCE_SEC = 3
#: The exit status of a process killed by SIGKILL (our timeout's, or the OOM killer's).
KILLED_EXIT = 137
#: Exit statuses of a command ``timeout -s KILL`` ended: its own 124, or 137 (KILL).
TIMEOUT_EXITS = (124, KILLED_EXIT)
#: Where a run's stdin is written in the workspace; removed before the snippet starts.
STDIN_FILE = ".gitpilot-stdin"


#: What the wrapper writes when the image lacks the snippet's interpreter (then exit 127).
MISSING_MARK = "gitpilot: this image has no command named"
#: A bash function setting ``__gp_n`` to the container's count of OOM kills (cgroup v2, else
#: v1; 0 when neither is readable): the report says how many happened during the snippet.
OOM_COUNTER = (
    "__gp_oom() { __gp_n=0; local f k v; "
    "for f in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control; do "
    '[ -r "$f" ] || continue; '
    'while read -r k v; do if [ "$k" = oom_kill ]; then __gp_n=$v; fi; done < "$f"; break; '
    "done; }"
)


def new_marker() -> str:
    """A marker no snippet can guess: ``gitpilot-`` and 24 hex characters."""
    return "gitpilot-" + secrets.token_hex(12)


def wrapped_command(argv: list[str], timeout_sec: int, marker: str, *, stdin: str) -> str:
    """The shell text that runs ``argv`` under our timeout, then writes our report.

    ``stdin`` is where the snippet's stdin comes from: ``"none"`` (``/dev/null``),
    ``"file"`` (:data:`STDIN_FILE` in the workspace, unlinked before the snippet starts)
    or ``"inherited"`` (the shell's own). An argument that starts with ``$PWD/`` names
    a file of the workspace by its absolute path in the container.
    """
    words = [
        f'"$PWD"/{shlex.quote(a[len("$PWD/") :])}' if a.startswith("$PWD/") else shlex.quote(a)
        for a in argv
    ]
    # The snippet writes to the real stderr (fd 4) while the shell's own stderr is
    # /dev/null: bash would otherwise add "Killed ..." when our timeout kills the group.
    run = f"timeout -s KILL {int(timeout_sec)} {' '.join(words)} 2>&4 4>&-"
    redirect = {"none": " < /dev/null", "file": f" < {STDIN_FILE}", "inherited": ""}[stdin]
    if stdin == "file":
        # Opened before the snippet starts, then unlinked: the snippet sees a clean folder.
        run = f"rm -f {STDIN_FILE}; {run}"
    now = "${EPOCHREALTIME//[.,]/}"
    interpreter = shlex.quote(argv[0])
    return "\n".join(
        [
            (
                "command -v timeout >/dev/null || "
                "{ echo 'gitpilot: this image has no timeout command (coreutils)' >&2; exit 126; }"
            ),
            (
                f"command -v {interpreter} >/dev/null || "
                f"{{ echo {shlex.quote(f'{MISSING_MARK} {argv[0]}')} >&2; exit 127; }}"
            ),
            OOM_COUNTER,
            f"__gp_oom; __gp_o0=$__gp_n; __gp_t0={now}; __gp_rc=0",
            f"{{ {run} || __gp_rc=$?; }}{redirect} 4>&2 2>/dev/null",
            f"__gp_t1={now}; __gp_oom",
            (
                f'printf \'\\n%s %d %d %d\\n\' {marker} "$__gp_rc" "$((__gp_t1 - __gp_t0))" '
                '"$((__gp_n - __gp_o0))" >&2'
            ),
            'exit "$__gp_rc"',
        ]
    )


def snippet_script(
    code: str, filename: str, argv: list[str], timeout_sec: int, marker: str, *, stdin: bool
) -> str:
    """A bash script for ``POST /code/run`` that writes ``code`` to ``filename`` and runs it.

    The Runner runs it as ``bash script.sh [< stdin.txt]`` in the workspace: it removes
    both (bash reads from its open file), writes the snippet byte for byte (a quoted
    here-document ended by the marker, then the newline it adds is cut) and runs the
    wrapper with the stdin it was given.
    """
    name = shlex.quote(filename)
    return "\n".join(
        [
            "rm -f script.sh stdin.txt",
            f"cat > {name} <<'{marker}'",
            code,
            marker,
            f"truncate -s -1 {name}",
            wrapped_command(argv, timeout_sec, marker, stdin="inherited" if stdin else "none"),
            "",
        ]
    )


@dataclass(frozen=True)
class Report:
    """What the wrapper said about one run."""

    exit_code: int
    elapsed_us: int
    #: OOM kills in the container while the snippet ran (its memory limit was hit).
    oom_kills: int = 0

    def memory_exceeded(self, timeout_sec: int) -> bool:
        """Killed (SIGKILL) by the OOM killer, not by our timeout."""
        return (
            self.exit_code == KILLED_EXIT and self.oom_kills > 0 and not self.timed_out(timeout_sec)
        )

    def timed_out(self, timeout_sec: int) -> bool:
        """Killed by our ``timeout`` at the snippet's own deadline."""
        return self.exit_code in TIMEOUT_EXITS and self.elapsed_us >= timeout_sec * 1_000_000


def read_report(stderr: str, marker: str) -> tuple[str, Report | None]:
    """``stderr`` without the wrapper's line, and that line's report (None when absent)."""
    found = re.search(rf"\n?{re.escape(marker)} (-?\d+) (-?\d+)(?: (-?\d+))?\n?\Z", stderr)
    if found is None:
        return stderr, None
    report = Report(int(found.group(1)), int(found.group(2)), max(0, int(found.group(3) or 0)))
    return stderr[: found.start()], report
