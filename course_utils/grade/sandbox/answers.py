"""Interview mode's numeric follow-ups: each answer as a value the result's restricted unpickler accepts."""

from __future__ import annotations


def number_answer(value):
    """An answer as a value the result's restricted unpickler accepts: an int of int64 range, a float or a short
    string (a 9,000-digit int or a str subclass would make the whole result unreadable, zeroing every exercise)."""
    try:
        if isinstance(value, bool):
            return repr(bool(value))
        if isinstance(value, int):
            number = int.__index__(value)
            if -(1 << 63) <= number < 1 << 63:
                return number
            return float(number) if number.bit_length() < 1000 else float("inf") if number > 0 else float("-inf")
        if isinstance(value, float):
            return float.__float__(value)
        if isinstance(value, str):
            return str.__str__(value)[:80]
        return str(repr(value))[:80]
    except Exception:  # noqa: BLE001 - a repr that raises is the learner's
        return "<unreadable answer>"
