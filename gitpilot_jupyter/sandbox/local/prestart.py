"""A python slot whose interpreter is already started, waiting for its code.

A python slot of the warm pool (:mod:`.pool`) is the cold launch chain with one
addition: the interpreter starts too, on the command a cold run uses (``python
inline.py``), before ``inline.py`` exists. It gets through its whole start-up,
``site`` included, and waits in a hook ``site`` imports last: a ``sitecustomize``
module in a folder of the run's private ``/tmp``, found through ``PYTHONPATH`` (its
source: ``chain/prestart_hook.py``). When the code arrives (through a pipe on the
code fd, :data:`.launchplan.CODE`, read to its end), the hook writes it to
``inline.py`` in the run folder, removes every trace of itself (its file and folder,
its ``sys.path`` entry and importer, its ``PYTHONPATH`` entry, its module, the fds)
and imports the interpreter's own ``sitecustomize`` if there is one, as a cold start
would at that point. Then the
interpreter goes on exactly as a cold start does: it opens ``inline.py`` and runs
it as the real ``__main__``. Coding declarations, syntax errors, tracebacks,
``SystemExit``, ``KeyboardInterrupt``, ``sys.argv``, ``sys.path[0]``, ``__file__``,
stdin, flushing and ``atexit`` are the interpreter's own: no frame of the hook is
on the stack when the snippet runs. Its stdout and stderr are the run's pipes, as
in a cold run; they reach it on fds of their own (:data:`.launchplan.RUN_STDOUT`,
:data:`.launchplan.RUN_STDERR`), which the
hook moves onto 1 and 2 when it starts, so that bubblewrap's processes never hold
them.

What stays different: the process's initial environment block
(``/proc/self/environ``) still names ``PYTHONPATH`` (``os.environ`` does not); the
interpreter started earlier than the run (its start time in ``/proc``); and what
the interpreter's start writes to stdout before the hook (a ``.pth`` file's print)
is at the start of the run's stderr, not its stdout (the chain has one pipe).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path

from ..scripts import with_names
from . import launchplan

#: The run's private folder the hook is written to, inside the sandbox (its own /tmp).
HOOK_DIR = "/tmp/.gitpilot-prestart"
HOOK_MODULE = "sitecustomize"
#: In the run folder on the host (never visible inside): the hook's source, and the
#: FIFO the code comes through.
HOOK_FILE = ".prestart.py"
CODE_FIFO = ".code"
#: The chain's own stdout and stderr: what bubblewrap (and the interpreter's start,
#: before the hook) writes there is the run's stderr (see :class:`.pool.Slot`). The
#: run's own pipes come on fds of their own (:data:`.launchplan.RUN_STDOUT`,
#: ``RUN_STDERR``), so bubblewrap's monitor and init, which close every fd but 0-2,
#: never hold them: the output ends when the interpreter's process does, not when
#: bubblewrap's init is done tearing down the sandbox's namespaces after it.
CHAIN_FIFO = ".chain-output"

#: The hook, a file of its own (checked by ruff like the package): the names it is
#: given, each on a line of its own at its top.
HOOK_SOURCE = Path(__file__).parent / "chain" / "prestart_hook.py"


@functools.cache
def _hook_text() -> str:
    return HOOK_SOURCE.read_text()


def frame(code: bytes) -> bytes:
    """``code`` as the hook reads it: its length first (a cut hand-over runs nothing)."""
    return b"%d\n" % len(code) + code


def hook_source(filename: str) -> str:
    """The hook's source: wait for the code, write it to ``filename``, leave no trace.

    Its fds are :mod:`.launchplan`'s (the code FIFO, the run's stdout and stderr), the
    file's own lines ``NAME = ...`` replaced by them (the file is made as bubblewrap's
    ``--file`` makes a cold run's: mode 0666 whatever the umask).
    """
    given = {
        "CODE_FD": str(launchplan.CODE.number),
        "RUN_STDOUT_FD": str(launchplan.RUN_STDOUT.number),
        "RUN_STDERR_FD": str(launchplan.RUN_STDERR.number),
        "SNIPPET": repr(filename),
    }
    return with_names(_hook_text(), given)


def applies(language: str) -> bool:
    """True for the languages whose slots start their interpreter ahead."""
    return language == "python"


def hook_env(env: Mapping[str, str], folder: str = HOOK_DIR) -> dict[str, str]:
    """``env`` with the hook's ``folder`` first on ``PYTHONPATH`` (the hook takes it off)."""
    if "PYTHONPATH" in env:
        return {**env, "PYTHONPATH": folder + os.pathsep + env["PYTHONPATH"]}
    return {**env, "PYTHONPATH": folder}
