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


def kv_cache_bytes(*args, **kwargs):
    """Importable (exercise 6 imports it for a table it prints once its check passes), not callable here."""
    raise RuntimeError("course_utils.kv_cache_bytes is not available while a submission is graded: interview mode "
                       "asks for its numbers, work them out yourself")


def __getattr__(name):
    raise AttributeError(f"course_utils.{name} is not available while a submission is graded: the exercise asks "
                         f"you to write it yourself (available: {', '.join(__all__)})")


if (Path(__file__).parent / "capstone").is_dir():  # mounted only where the capstone's function is graded
    from .capstone import gpt, induction
    sys.modules[f"{__name__}.gpt"], sys.modules[f"{__name__}.induction"] = gpt, induction
