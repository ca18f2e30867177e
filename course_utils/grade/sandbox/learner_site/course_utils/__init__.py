"""course_utils as a submission sees it while it is graded: the book's data, the device helpers, the
KV-cache size formula, the figures (``course_utils.viz``), and a check() that only records which class to grade. The reference implementations
and the grader are not here."""
from . import grade
from .data import BOOK_TOKENS, book_batch, book_inputs
from .device import DEVICE_ENV_VAR, get_device, synchronize
from .sizes import kv_cache_bytes

__all__ = ("BOOK_TOKENS", "DEVICE_ENV_VAR", "book_batch", "book_inputs", "get_device", "grade", "kv_cache_bytes",
            "synchronize")


def __getattr__(name):
    raise AttributeError(f"course_utils.{name} is not available while a submission is graded: the exercise asks "
                         f"you to write it yourself (available: {', '.join(__all__)})")
