"""Chinese text filled in: one space between a Han character and a Latin letter or digit where a value meets the
template, none between two Chinese characters or punctuation (the renderer of the catalogue's Chinese)."""

from __future__ import annotations

import string

_FORMATTER = string.Formatter()


def fill_zh(template: str, values: dict) -> str:
    """``template.format(**values)``, spacing Chinese and Latin text where a value meets the template: one space
    between a Han character and a Latin letter or digit, none between two Chinese characters or punctuation."""
    out = ""
    for literal, field, spec, conversion in _FORMATTER.parse(template):
        out = _meet(out, literal)
        if field is not None:
            value = values[field]
            if conversion:
                value = _FORMATTER.convert_field(value, conversion)
            out = _meet(out, format(value, spec or "") if spec or not isinstance(value, str) else value)
    return out


def _han(c: str) -> bool:
    return "\u4e00" <= c <= "\u9fff" or "\u3400" <= c <= "\u4dbf"


def _wide(c: str) -> bool:  # Han, or full-width punctuation (，：；（）「」“” ...)
    return _han(c) or "\u3000" <= c <= "\u303f" or "\uff00" <= c <= "\uffef" or c in "“”‘’…—"


_LATIN_START = frozenset(string.ascii_letters + string.digits + "_([<√'\"-.")
_LATIN_END = frozenset(string.ascii_letters + string.digits + "_)]>'\"")


def _meet(left: str, right: str) -> str:
    if not left or not right:
        return left + right
    if left[-1] == " " and len(left) > 1 and _wide(left[-2]) and _wide(right[0]):
        return left[:-1] + right
    if right[0] == " " and len(right) > 1 and _wide(left[-1]) and _wide(right[1]):
        return left + right[1:]
    if (_han(left[-1]) and right[0] in _LATIN_START) or (left[-1] in _LATIN_END and _han(right[0])):
        return left + " " + right
    return left + right
