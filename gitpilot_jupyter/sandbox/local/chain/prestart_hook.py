"""A started interpreter's hook (see :mod:`..prestart`), imported by ``site`` as
``sitecustomize`` from the run's private ``/tmp``: wait for the code, write it to the
snippet file, leave no trace, then import the interpreter's own ``sitecustomize``.

Not a module of the package: :func:`..prestart.hook_source` sets the four names
below (the fds from :mod:`..launchplan`'s table, the snippet's file name) and the
run's chain copies the result into the sandbox. It imports nothing ``site`` has not
imported already (os, sys).
"""

import os
import sys

CODE_FD = 7
RUN_STDOUT_FD = 8
RUN_STDERR_FD = 9
SNIPPET = "inline.py"

if __name__ != "sitecustomize":
    raise ImportError("only a started interpreter's site imports this hook")
here = os.path.dirname(__file__)
os.dup2(RUN_STDOUT_FD, 1)
os.dup2(RUN_STDERR_FD, 2)
os.close(RUN_STDOUT_FD)
os.close(RUN_STDERR_FD)
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
        chunk = os.read(CODE_FD, 65536)
        if not chunk:
            break
        parts.append(chunk)
    os.close(CODE_FD)
    size, _, code = b"".join(parts).partition(b"\n")
    if not size.isdigit() or int(size) != len(code):
        os._exit(1)  # a hand-over cut short: no part of it runs
    fd = os.open(SNIPPET, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        os.fchmod(fd, 0o666)
        view = memoryview(code)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
except OSError as error:
    path = os.path.join(os.getcwd(), SNIPPET)
    os.write(2, f"bwrap: Can't write data to file {path}: {error.strerror}\n".encode())
    os._exit(1)
while here in sys.path:
    sys.path.remove(here)
sys.path_importer_cache.pop(here, None)
given = os.environ.get("PYTHONPATH", "")
if given.startswith(here + os.pathsep):
    os.environ["PYTHONPATH"] = given[len(here) + 1 :]
elif given == here:
    del os.environ["PYTHONPATH"]
del sys.modules[__name__]
del here, parts, chunk, size, code, fd, view, cached, path, given
del CODE_FD, RUN_STDOUT_FD, RUN_STDERR_FD, SNIPPET
# The interpreter's own, found now the hook is gone.
import sitecustomize  # type: ignore[import-not-found]  # noqa: E402, F401
