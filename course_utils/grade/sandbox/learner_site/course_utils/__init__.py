"""course_utils as a submission sees it while it is graded: this file and ``grade.py`` (a check() that only
records which class to grade), beside the top-level modules of the course's course_utils (the book's data, the
device helpers, the figures). The reference implementations (``reference/``), the capstone's model
(``capstone/``, mounted only where the capstone's function is graded alone) and the grader are not here; nor are
the cache-size formulas, whose numbers interview mode asks for."""

import sys
from pathlib import Path

from . import grade
from .data import BOOK_TOKENS, book_batch, book_inputs
from .device import DEVICE_ENV_VAR, get_device, synchronize

__all__ = ("BOOK_TOKENS", "DEVICE_ENV_VAR", "book_batch", "book_inputs", "get_device", "grade", "synchronize")


# the harness's texts (the sandbox package, mounted beside this one): the errors below in the learner's language
try:
    from sandbox.texts import Said
except ImportError:
    Said = Exception


class NotAvailable(Said, RuntimeError):
    pass


class Withheld(Said, AttributeError):
    pass


def _error(cls, base, key, **args):
    if Said is Exception:  # no texts to say it with: the English
        return base(
            {
                "course_numbers": "course_utils.{name} is not available while a submission is graded: "
                "interview mode asks for its numbers, work them out yourself",
                "course_withheld": "course_utils.{name} is not available while a submission is graded: the "
                "exercise asks you to write it yourself (available: {available})",
            }[key].format(**args)
        )
    return cls(key, **args)


def kv_cache_bytes(*args, **kwargs):
    """Importable (exercise 6 imports it for a table it prints once its check passes), not callable here."""
    raise _error(NotAvailable, RuntimeError, "course_numbers", name="kv_cache_bytes")


def __getattr__(name):
    if name.startswith("__"):  # Python's own probes (__path__, __file__ ...): no message to make
        raise AttributeError(name)
    key = "course_numbers" if name == "mla_cache_bytes" else "course_withheld"
    raise _error(Withheld, AttributeError, key, name=name, available=", ".join(__all__))


if (Path(__file__).parent / "capstone").is_dir():  # mounted only where the capstone's function is graded
    from .capstone import gpt, induction

    sys.modules[f"{__name__}.gpt"], sys.modules[f"{__name__}.induction"] = gpt, induction
