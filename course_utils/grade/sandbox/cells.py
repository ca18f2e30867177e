"""The submission's cells, run one by one in one namespace under an alarm (a cell that runs too long is
stopped); a cell that fails is a note, and the next cell runs."""

from __future__ import annotations

import builtins
import linecache
import signal

from .errors import CellTimeout, describe_exception


def alarm(signum, frame):
    raise CellTimeout()


def get_ipython_stub():
    class _Shell:  # nbconvert exports call get_ipython().run_line_magic(...): nothing to do when grading
        def __getattr__(self, name):
            return lambda *args, **kwargs: None

    return _Shell()


def new_namespace() -> dict:
    """The namespace the cells run in, as a notebook's: ``__main__``, with a ``get_ipython`` that does nothing."""
    return {"__name__": "__main__", "__builtins__": builtins, "get_ipython": get_ipython_stub}


def run_cells(cells: list, namespace: dict, timeout: float, note) -> set:
    """Run each cell in ``namespace`` under the alarm (``timeout`` seconds); what stops a cell is a ``note(key,
    **args)`` and the next cell runs. Returns the cells' file names: what a traceback names as the learner's code."""
    learner_files: set = set()
    for cell in cells:
        filename = f"<cell {cell['index']}>"
        linecache.cache[filename] = (len(cell["source"]), None, cell["source"].splitlines(True), filename)
        learner_files.add(filename)
        try:
            code = compile(cell["source"], filename, "exec")
        except SyntaxError as exc:
            note("cell_syntax", cell=str(cell["index"]), message=str(exc.msg), line=str(exc.lineno))
            continue
        signal.setitimer(signal.ITIMER_PROF, timeout)
        try:
            exec(code, namespace)
        except SystemExit:
            note("cell_exit", cell=str(cell["index"]))
        except BaseException as exc:  # noqa: BLE001 - timeouts and learner errors are all reported
            d = describe_exception(exc, learner_files, "cell")
            message = d["said"] or d["message"]
            if d["line"]:
                note("cell_error_line", cell=str(cell["index"]), type=d["type"], message=message, line=d["line_said"])
            else:
                note("cell_error", cell=str(cell["index"]), type=d["type"], message=message)
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
    return learner_files
