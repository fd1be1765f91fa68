"""The display runtime of a python run: display(), MIME bundles, frames, figures.

Not a module of the package: the shim (``shim.py``) carries this text (set by
:func:`.wire.shim_source`) and compiles it in the run only when something is displayed
or matplotlib is imported, so that a run which displays nothing pays for none of it.
Stdlib only: binascii and _json, the interpreter's own C (base64 and json would import
re, enum, functools...: tens of milliseconds of the snippet's time).
"""

import os
import sys


def make(nonce: str, mark: bytes) -> dict[str, object]:  # noqa: C901 - one closure
    """The runtime's functions for a run whose frames carry ``nonce`` after ``mark``:
    ``display``, ``show_figures`` and ``make_backend``."""
    binary = ("image/png", "image/jpeg", "image/gif")
    reprs = (
        ("text/html", "_repr_html_"),
        ("text/markdown", "_repr_markdown_"),
        ("image/svg+xml", "_repr_svg_"),
        ("image/png", "_repr_png_"),
        ("image/jpeg", "_repr_jpeg_"),
        ("text/latex", "_repr_latex_"),
        ("application/json", "_repr_json_"),
        ("application/javascript", "_repr_javascript_"),
    )
    shown_figures: set[int] = set()

    pipe_grown: list[bool] = []

    def write_out(data: bytes) -> None:
        if len(data) > 65536 and not pipe_grown and sys.platform == "linux":
            # A pipe holds 64 KiB: an image would cross in as many turns of the reader,
            # each a wait for a core on a busy host. 1 MiB is what any user may ask for.
            pipe_grown.append(True)
            try:
                import fcntl

                fcntl.fcntl(1, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
            except (ImportError, OSError):
                pass
        view = memoryview(data)
        while view:
            view = view[os.write(1, view) :]

    def flush_stdout() -> None:
        for stream in (sys.stdout, sys.__stdout__):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                pass

    # What a display costs is the snippet's time: base64 and json would import re (and
    # enum, functools...: tens of ms); binascii and _json are the interpreter's own C.
    def as_base64(data: bytes) -> str:
        import binascii

        return binascii.b2a_base64(data, newline=False).decode("ascii")

    # What JSON never escapes, of ASCII: a string of only these goes in as it is. One
    # pass of bytes.translate (0.5 ms a MiB of base64; isprintable() took 1.8 ms).
    unescaped = bytes(c for c in range(32, 128) if c not in b'"\\')

    def json_text(value: object, out: list[str]) -> None:
        """``value`` as JSON text (``json.dumps(ensure_ascii=False, allow_nan=False)``)."""
        from _json import encode_basestring

        if isinstance(value, str):
            # (isascii: a flag of the string; encode: a copy)
            if value.isascii() and not value.encode("ascii").translate(None, unescaped):
                out += ('"', value, '"')
            else:
                out.append(encode_basestring(value))
        elif value is None or isinstance(value, bool):
            out.append({None: "null", True: "true", False: "false"}[value])
        elif isinstance(value, int):
            out.append(int.__repr__(value))
        elif isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                raise ValueError("not a JSON number")
            out.append(float.__repr__(value))
        elif isinstance(value, (list, tuple)):
            out.append("[")
            for number, item in enumerate(value):
                out.append(", " if number else "")
                json_text(item, out)
            out.append("]")
        elif isinstance(value, dict):
            out.append("{")
            for number, (key, item) in enumerate(value.items()):
                if not isinstance(key, str):
                    raise TypeError("a JSON key is a string")
                out.append(", " if number else "")
                out.append(encode_basestring(key) + ": ")
                json_text(item, out)
            out.append("}")
        else:
            raise TypeError(f"{type(value).__name__} is not JSON")

    def figure_png(figure: object) -> str:
        import io

        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", bbox_inches="tight")  # type: ignore[attr-defined]
        return as_base64(buffer.getvalue())

    def is_figure(obj: object) -> bool:
        figure_module = sys.modules.get("matplotlib.figure")
        return figure_module is not None and isinstance(obj, figure_module.Figure)

    def bundle(
        obj: object, include: object, exclude: object
    ) -> tuple[dict[str, object], dict[str, object]]:
        data: dict[str, object] = {}
        metadata: dict[str, object] = {}
        if isinstance(obj, type):  # a class: its methods are unbound (as IPython does)
            return {"text/plain": repr(obj)}, metadata
        if is_figure(obj):
            shown_figures.add(id(obj))
            data["image/png"] = figure_png(obj)
        method = getattr(obj, "_repr_mimebundle_", None)
        if callable(method):
            try:
                answer = method(include=include, exclude=exclude)
            except Exception:
                answer = None
            if isinstance(answer, tuple) and len(answer) == 2:
                answer, more = answer
                if isinstance(more, dict):
                    metadata.update(more)
            if isinstance(answer, dict):
                data.update(answer)
        for mime, name in reprs:
            if mime in data:
                continue
            method = getattr(obj, name, None)
            if not callable(method):
                continue
            try:
                value = method()
            except Exception:
                continue
            if isinstance(value, tuple) and len(value) == 2:
                value, more = value
                metadata[mime] = more
            if value is None:
                continue
            if mime in binary and isinstance(value, bytes):
                value = as_base64(value)
            elif isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            data[mime] = value
        if "text/plain" not in data:
            try:
                data["text/plain"] = repr(obj)
            except Exception:
                data["text/plain"] = f"<{type(obj).__name__} object>"
        return data, metadata

    def emit(data: dict[str, object], metadata: dict[str, object]) -> None:
        flush_stdout()
        if not nonce:  # nothing is a frame: the text, as IPython's display does unconnected
            text = data.get("text/plain")
            if text is not None:
                print(text)
            return

        def encoded(value: object) -> bytes | None:
            out: list[str] = []
            try:
                json_text(value, out)
            except (TypeError, ValueError, RecursionError):
                return None
            return "".join(out).encode("utf-8", "replace")  # (a lone surrogate: "?")

        payload = encoded({"data": data, "metadata": metadata})
        if payload is None:  # leave out what is no JSON
            data = {k: v for k, v in data.items() if encoded(v) is not None}
            metadata = {k: v for k, v in metadata.items() if encoded(v) is not None}
            payload = encoded({"data": data, "metadata": metadata}) or b"{}"
        header = mark + nonce.encode("ascii") + b" " + str(len(payload)).encode("ascii") + b"\n"
        try:
            write_out(header)
            write_out(payload)
        except OSError:
            pass

    def display(
        *objs: object,
        include: object = None,
        exclude: object = None,
        metadata: object = None,
        transient: object = None,
        display_id: object = None,
        raw: bool = False,
        clear: bool = False,
        **kwargs: object,
    ) -> None:
        """Show each of ``objs`` as a notebook cell's output (its richest forms)."""
        for obj in objs:
            more: dict[str, object] = {}
            if raw and isinstance(obj, dict):
                data = dict(obj)
            else:
                data, more = bundle(obj, include, exclude)
            if isinstance(metadata, dict):
                more.update(metadata)
            emit(data, more)

    def show_figures(close: bool) -> None:
        """Show the open figures (``plt.show()``: and close them; at the end: those not
        shown yet)."""
        helpers = sys.modules.get("matplotlib._pylab_helpers")
        if helpers is None:
            return
        for manager in helpers.Gcf.get_all_fig_managers():
            figure = manager.canvas.figure
            if close or id(figure) not in shown_figures:
                display(figure)
        if close:
            helpers.Gcf.destroy_all()

    def make_backend(module: object) -> None:
        from matplotlib.backend_bases import FigureManagerBase
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        class FigureManager(FigureManagerBase):
            def show(self) -> None:
                display(self.canvas.figure)

        class FigureCanvas(FigureCanvasAgg):
            manager_class = FigureManager

        def show(*args: object, **kwargs: object) -> None:
            show_figures(close=True)

        module.FigureCanvas = FigureCanvas  # type: ignore[attr-defined]
        module.FigureManager = FigureManager  # type: ignore[attr-defined]
        module.show = show  # type: ignore[attr-defined]

    return {"display": display, "show_figures": show_figures, "make_backend": make_backend}
