"""Triton kernels run in Triton's interpreter (exercise 14), watched: every load and store a kernel makes is checked,
before it happens, against the memory of the tensors the kernel was launched with. A store past the end of a tensor
(an output written without its tail mask) is then an error the grader can name, where it used to corrupt the heap of
the process that ran it: the learner's own Jupyter kernel died ("double free or corruption"), the sandbox's child
crashed. And an error inside a ``tl`` function (``tl.dot`` on blocks whose shapes do not fit) is reported as that
function's, at the kernel's own line, not as an InterpreterError at the launch.

Nothing is imported here until a kernel may run: ``Watched`` is a no-op where triton was never imported.
"""

from __future__ import annotations

import os
import sys
import traceback


class OutOfBounds(Exception):
    """A kernel's tl.load or tl.store reached memory outside every tensor it was launched with."""


_TL = os.path.join("triton", "language", "")  # frames of triton.language: the tl function that raised


def _spans(values) -> list[tuple[int, int]]:
    """[start, end) of the memory of every tensor among ``values`` (tuples searched too)."""
    spans = []
    for value in values:
        if isinstance(value, tuple):
            spans += _spans(value)
        elif hasattr(value, "untyped_storage"):
            storage = value.untyped_storage()
            spans.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes()))
    return spans


def _outside(addresses, mask, size: int, spans) -> bool:
    """Whether one of the ``addresses`` the ``mask`` lets through (``size`` bytes each) lies outside every span."""
    import numpy as np

    reached = np.asarray(addresses)[np.broadcast_to(np.asarray(mask, dtype=bool), np.shape(addresses))]
    if reached.size == 0:
        return False
    inside = np.zeros(reached.shape, dtype=bool)
    for start, end in spans:
        inside |= (reached >= start) & (reached + size <= end)
    return not bool(inside.all())


def _tl_function(exc: BaseException):
    """(the tl function an error came from, e.g. "dot", and the shapes of its inputs), or (None, "")."""
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        code = frame.f_code
        if _TL in code.co_filename and code.co_name not in ("wrapper", "<lambda>") and not code.co_name.startswith("_"):
            shapes = [
                f"{name} {tuple(int(d) for d in value.shape)}"
                for name in ("input", "other")
                if (value := frame.f_locals.get(name)) is not None and hasattr(value, "shape")
            ]
            return code.co_name, (" (" + ", ".join(shapes) + ")" if shapes else "")
    return None, ""


class Watched:
    """While entered, Triton's interpreter checks each kernel's memory accesses and reports a kernel's errors as its
    own (see the module's docstring); restored on exit. Entered around a call of learner code."""

    def __enter__(self):
        self.active = "triton" in sys.modules  # a kernel is only ever launched by code that imported triton
        if not self.active:
            return self
        from triton.runtime import interpreter as it

        self._it = it
        self._saved = (
            it.GridExecutor.__call__,
            it.InterpreterBuilder.create_masked_load,
            it.InterpreterBuilder.create_masked_store,
        )
        launch, load, store = self._saved
        launched = []  # the spans of the kernels running now (a stack: a launch inside a launch)

        def checked(what, ptrs, mask, size):
            if launched and _outside(ptrs.data, mask.data, size, launched[-1]):
                raise OutOfBounds(
                    f"tl.{what} reached memory outside every tensor the kernel was given (a {what} without the mask "
                    f"of the rows past the sequence's end?)"
                )

        def masked_load(builder, ptrs, mask, other, *args, **kwargs):
            import numpy as np

            checked("load", ptrs, mask, np.dtype(it._get_np_dtype(ptrs.get_element_ty())).itemsize)
            return load(builder, ptrs, mask, other, *args, **kwargs)

        def masked_store(builder, ptrs, value, mask, *args, **kwargs):
            checked("store", ptrs, mask, value.data.itemsize)
            return store(builder, ptrs, value, mask, *args, **kwargs)

        def launch_watched(executor, *args, **kwargs):
            launched.append(_spans(list(args) + list(kwargs.values())))
            try:
                return launch(executor, *args, **kwargs)
            except it.InterpreterError as exc:
                cause = exc.__cause__
                if cause is None:
                    raise
                name, shapes = _tl_function(cause)
                said_already = isinstance(cause, OutOfBounds)
                if name is not None and not said_already and cause.args and isinstance(cause.args[0], str):
                    cause.args = (f"tl.{name}: {cause.args[0]}{shapes}", *cause.args[1:])
                raise cause from None  # its traceback holds the kernel's own line
            finally:
                launched.pop()

        it.GridExecutor.__call__ = launch_watched
        it.InterpreterBuilder.create_masked_load = masked_load
        it.InterpreterBuilder.create_masked_store = masked_store
        return self

    def __exit__(self, *exc):
        if self.active:
            it = self._it
            it.GridExecutor.__call__, it.InterpreterBuilder.create_masked_load = self._saved[:2]
            it.InterpreterBuilder.create_masked_store = self._saved[2]
        return False
