"""A python slot whose interpreter is already started, waiting for its code.

A python slot of the warm pool (:mod:`.pool`) is the cold launch chain with one
addition: the interpreter starts too, on the command a cold run uses
(``python inline.py``), before ``inline.py`` exists. It gets through its whole
start-up, ``site`` included, and waits in a hook ``site`` imports last: a
``sitecustomize`` module in a folder of the run's private ``/tmp``, found through
``PYTHONPATH``. When the code arrives (through a pipe on fd :data:`CODE_FD`, read to
its end), the hook writes it to ``inline.py`` in the run folder, removes every
trace of itself (its file and folder, its ``sys.path`` entry and importer, its
``PYTHONPATH`` entry, its module, the fds) and imports the interpreter's own
``sitecustomize`` if there is one, as a cold start would at that point. Then the
interpreter goes on exactly as a cold start does: it opens ``inline.py`` and runs
it as the real ``__main__``. Coding declarations, syntax errors, tracebacks,
``SystemExit``, ``KeyboardInterrupt``, ``sys.argv``, ``sys.path[0]``, ``__file__``,
stdin, flushing and ``atexit`` are the interpreter's own: no frame of the hook is
on the stack when the snippet runs. Its stdout and stderr are the run's pipes, as
in a cold run; they reach it on fds of their own (:data:`OUTPUT_FDS`), which the
hook moves onto 1 and 2 when it starts, so that bubblewrap's processes never hold
them.

What stays different: the process's initial environment block
(``/proc/self/environ``) still names ``PYTHONPATH`` (``os.environ`` does not); the
interpreter started earlier than the run (its start time in ``/proc``); and what
the interpreter's start writes to stdout before the hook (a ``.pth`` file's print)
is at the start of the run's stderr, not its stdout (the chain has one pipe).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

#: The fd the started interpreter reads its code from (one digit: dash redirects it).
CODE_FD = 7
#: The fds the run's own stdout and stderr pipes come on (one digit each). The
#: chain's stdout and stderr are another pipe (:data:`CHAIN_FIFO`), so bubblewrap's
#: monitor and init, which close every fd but those three, never hold the run's
#: pipes: the output ends when the interpreter's process does, not when bubblewrap's
#: init is done tearing down the sandbox's namespaces after it. The hook moves them
#: onto 1 and 2 before anything of the run is written.
OUTPUT_FDS = (8, 9)
#: The run's private folder the hook is written to, inside the sandbox (its own /tmp).
HOOK_DIR = "/tmp/.gitpilot-prestart"
HOOK_MODULE = "sitecustomize"
#: In the run folder on the host (never visible inside): the hook's source, and the
#: FIFO the code comes through.
HOOK_FILE = ".prestart.py"
CODE_FIFO = ".code"
#: The chain's own stdout and stderr: what bubblewrap (and the interpreter's start,
#: before the hook) writes there is the run's stderr (see :class:`.pool.Slot`).
CHAIN_FIFO = ".chain-output"

#: Imports nothing ``site`` has not imported already (os, sys). The file is made as
#: bubblewrap's ``--file`` makes a cold run's (mode 0666 whatever the umask).
_HOOK = """\
import os
import sys

here = os.path.dirname(__file__)
os.dup2({out}, 1)
os.dup2({err}, 2)
os.close({out})
os.close({err})
# The hook's files go before the wait: nothing of the run's time is spent on them.
cached = globals().get("__cached__")
for path in (cached, cached and os.path.dirname(cached), __file__, here):
    try:
        if path and os.path.isdir(path):
            os.rmdir(path)
        elif path:
            os.unlink(path)
    except OSError:
        pass
try:
    parts = []
    while True:
        chunk = os.read({fd}, 65536)
        if not chunk:
            break
        parts.append(chunk)
    os.close({fd})
    size, _, code = b"".join(parts).partition(b"\\n")
    if not size.isdigit() or int(size) != len(code):
        os._exit(1)  # a hand-over cut short: no part of it runs
    fd = os.open({name!r}, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        os.fchmod(fd, 0o666)
        view = memoryview(code)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
except OSError as error:
    path = os.path.join(os.getcwd(), {name!r})
    os.write(2, f"bwrap: Can't write data to file {{path}}: {{error.strerror}}\\n".encode())
    os._exit(1)
while here in sys.path:
    sys.path.remove(here)
sys.path_importer_cache.pop(here, None)
given = os.environ.get("PYTHONPATH", "")
if given.startswith(here + os.pathsep):
    os.environ["PYTHONPATH"] = given[len(here) + 1:]
elif given == here:
    del os.environ["PYTHONPATH"]
del sys.modules[__name__]
del here, parts, chunk, size, code, fd, view, cached, path, given
import {module}
"""


def frame(code: bytes) -> bytes:
    """``code`` as the hook reads it: its length first (a cut hand-over runs nothing)."""
    return b"%d\n" % len(code) + code


def hook_source(filename: str) -> str:
    """The hook's source: wait for the code, write it to ``filename``, leave no trace."""
    out, err = OUTPUT_FDS
    return _HOOK.format(fd=CODE_FD, out=out, err=err, name=filename, module=HOOK_MODULE)


def applies(language: str) -> bool:
    """True for the languages whose slots start their interpreter ahead."""
    return language == "python"


def hook_env(env: Mapping[str, str], folder: str = HOOK_DIR) -> dict[str, str]:
    """``env`` with the hook's ``folder`` first on ``PYTHONPATH`` (the hook takes it off)."""
    if "PYTHONPATH" in env:
        return {**env, "PYTHONPATH": folder + os.pathsep + env["PYTHONPATH"]}
    return {**env, "PYTHONPATH": folder}
