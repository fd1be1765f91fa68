# The display shim of a python run (see gitpilot_jupyter/sandbox/rich/__init__.py):
# every python run's command is `python -c "<this file>" inline.py`. Not a module of the
# package: :func:`..rich.wire.shim_source` sets the names below (each on a line of its
# own) and the run's command carries the text. Stdlib only; it imports nothing at
# start but what the interpreter's start imported (os, sys), and the rest (json, base64,
# io) only when something is displayed.
#
# It restores what `python inline.py` gives (sys.argv, sys.path[0], __main__'s globals,
# coding cookies, SystemExit, KeyboardInterrupt, atexit, tracebacks without a frame of
# its own), shows an inline snippet's last expression as a notebook cell does, and
# writes display frames (the wire: gitpilot_jupyter/sandbox/rich/wire.py) to fd 1.
# No module docstring: it would be __main__'s __doc__.

FRAME_MARK = b"\x1egitpilot-display "
NONCE_ENV = "GITPILOT_DISPLAY"
BACKEND_MODULE = "gitpilot_display_matplotlib"
SHOW_LAST = "inline.py"
#: The display runtime's text (shim_display.py), compiled in the run when first needed.
DISPLAY_RUNTIME = ""


def _gitpilot_shim() -> None:  # noqa: C901 - one function: its frame is the only one
    import builtins
    import os
    import sys

    # The function as defined holds __main__'s globals: its snippet's objects would
    # outlive the module's clearing at exit (their finalizers then print nothing).
    globals().pop("_gitpilot_shim", None)

    mark = FRAME_MARK
    nonce = os.environ.get(NONCE_ENV, "")
    backend_module = BACKEND_MODULE
    show_last = SHOW_LAST
    runtime_text = DISPLAY_RUNTIME
    main_dict = sys.modules["__main__"].__dict__
    shim_file = sys._getframe().f_code.co_filename

    # -- what `python FILE` gives ---------------------------------------------------------
    filename = sys.argv[-1]
    path = os.path.abspath(filename)
    sys.argv[:] = [filename]
    if hasattr(sys, "orig_argv"):
        sys.orig_argv[:] = [sys.orig_argv[0], filename]
    if sys.path and sys.path[0] == "" and not sys.flags.isolated:
        sys.path[0] = os.path.dirname(path)
    external = sys.modules["_frozen_importlib_external"]
    bootstrap = sys.modules["_frozen_importlib"]
    main_dict.clear()
    main_dict.update(
        __name__="__main__",
        __doc__=None,
        __package__=None,
        __loader__=external.SourceFileLoader("__main__", path),
        __spec__=None,
        __annotations__={},
        __builtins__=builtins,
        __file__=path,
        __cached__=None,
    )

    # -- display (its runtime compiled when first needed) -----------------------------------
    made: dict[str, object] = {}

    def runtime(name: str) -> object:
        if not made:
            namespace: dict[str, object] = {"__name__": "gitpilot_display"}
            exec(compile(runtime_text, "<gitpilot display>", "exec"), namespace)
            made.update(namespace["make"](nonce, mark))  # type: ignore[operator]
        return made[name]

    def display(*objs: object, **options: object) -> None:
        """Show each of ``objs`` as a notebook cell's output (its richest forms)."""
        runtime("display")(*objs, **options)  # type: ignore[operator]

    def make_backend(module: object) -> None:
        runtime("make_backend")(module)  # type: ignore[operator]

    def show_figures_at_end() -> None:
        if "matplotlib._pylab_helpers" not in sys.modules:
            return
        try:  # noqa: SIM105 - contextlib is not imported in a run that needs it not
            runtime("show_figures")(close=False)  # type: ignore[operator]
        except Exception:  # a figure that cannot be drawn: the run's own outcome stands
            pass

    class Loader:
        """Makes the matplotlib backend module (``MPLBACKEND=module://...``)."""

        @staticmethod
        def create_module(spec: object) -> None:
            return None

        @staticmethod
        def exec_module(module: object) -> None:
            make_backend(module)

    class Finder:
        """Sets matplotlib's defaults, makes its backend, gives IPython this display."""

        @staticmethod
        def find_spec(name: str, path: object = None, target: object = None) -> object:
            if name == "matplotlib":
                os.environ.setdefault("MPLBACKEND", "module://" + backend_module)
                home = os.environ.get("TMPDIR") or os.getcwd()
                os.environ.setdefault("MPLCONFIGDIR", os.path.join(home, ".matplotlib"))
            elif name == backend_module:
                return bootstrap.ModuleSpec(name, Loader)
            elif name == "IPython.core.display_functions":
                for finder in sys.meta_path:
                    if finder is Finder or not hasattr(finder, "find_spec"):  # type: ignore[comparison-overlap]
                        continue
                    spec = finder.find_spec(name, path, target)  # type: ignore[arg-type]
                    if spec is not None and spec.loader is not None:
                        real = spec.loader.exec_module

                        def exec_module(module: object, real: object = real) -> None:
                            real(module)  # type: ignore[operator]
                            module.display = display  # type: ignore[attr-defined]

                        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
                        return spec
            return None

    builtins.display = display  # type: ignore[attr-defined]
    sys.meta_path.insert(0, Finder)  # type: ignore[arg-type]

    # -- the run --------------------------------------------------------------------------
    def suppressed(source: bytes, node: object) -> bool:
        """True when the statement ``node`` is followed by ``;`` (a cell shows nothing)."""
        lines = source.splitlines(keepends=True)
        end_line = getattr(node, "end_lineno", None)
        end_col = getattr(node, "end_col_offset", None)
        if end_line is None or end_col is None or end_line > len(lines):
            return False
        line = lines[end_line - 1]
        if end_line == 1 and line.startswith(b"\xef\xbb\xbf"):
            line = line[3:]
        rest = line[end_col:] + b"".join(lines[end_line:])
        return bool(rest.lstrip(b" \t\f\\\r\n").startswith(b";"))

    def strip_shim(error: BaseException) -> None:
        tb = error.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == shim_file:
            tb = tb.tb_next
        error.__traceback__ = tb

    try:
        try:
            with open(path, "rb") as file:
                source = file.read()
        except OSError as error:
            sys.stderr.write(f"{sys.executable}: can't open file {path!r}: {error}\n")
            raise SystemExit(2) from None
        last = None
        if filename == show_last:
            tree = compile(source, path, "exec", 0x400, dont_inherit=True)  # PyCF_ONLY_AST
            body = getattr(tree, "body", [])
            if body and type(body[-1]).__name__ == "Expr" and not suppressed(source, body[-1]):
                expression = compile("0", path, "eval", 0x400, dont_inherit=True)
                expression.body = body.pop().value  # type: ignore[attr-defined]
                last = compile(expression, path, "eval", dont_inherit=True)  # type: ignore[call-overload]
            code = compile(tree, path, "exec", dont_inherit=True)  # type: ignore[call-overload]
        else:
            code = compile(source, path, "exec", dont_inherit=True)
        exec(code, main_dict)
        if last is not None:
            value = eval(last, main_dict)
            if value is not None:
                display(value)
    except SystemExit:
        show_figures_at_end()
        raise
    except BaseException as error:
        show_figures_at_end()
        strip_shim(error)
        sys.excepthook(type(error), error, error.__traceback__)
        # Printed: the interpreter's own handling does the rest (exit status 1, or
        # SIGINT's for a KeyboardInterrupt, after atexit), its hook quiet.
        sys.excepthook = lambda *args: None
        raise
    show_figures_at_end()


type(_gitpilot_shim)(_gitpilot_shim.__code__, dict(globals()))()  # type: ignore[misc]
