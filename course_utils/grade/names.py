"""Submission file names from strangers: bytes that are not UTF-8, 255-byte names, odd characters. A name is
shown escaped (``escape.printable``), and each submission's feedback file gets a name derived from it that is
safe on every filesystem, unique in the batch (also where case does not count) and within the 255-byte limit."""

from __future__ import annotations

import hashlib
import os
import re

from .escape import FORMULA_START, printable

MAX_SHOWN = 120  # characters of a name in grades.csv, the terminal and the feedback
MAX_FILE_BYTES = 200  # a feedback file's name, ".md" included: under the common 255-byte limit
_SAFE = re.compile(r"[^\w.\-]")  # letters and digits of any script, '_', '.', '-'


def shown(name: str) -> str:
    """The name as the instructor sees it: undecodable bytes as \\xNN, controls escaped, long names cut."""
    return printable(name, MAX_SHOWN)


def key(name: str) -> str:
    """grades.csv's learner key: the name whole (never cut) and one key per name (two names never share one). Bytes
    that are not UTF-8, control characters, '%' and a first character that a spreadsheet
    would read as a formula (or space) are written as %XX
    (their bytes), everything else as it is: readable, and no cell a spreadsheet would run."""
    out = []
    for i, ch in enumerate(name):
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8 (os.fsdecode)
            out.append(f"%{code - 0xDC00:02X}")
        elif (
            ch == "%"
            or not ch.isprintable()
            or 0xD800 <= code <= 0xDFFF
            or (i == 0 and (ch in FORMULA_START or ch.isspace()))
        ):
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass")))
        else:
            out.append(ch)
    return "".join(out)


def _digest(name: str) -> str:
    return hashlib.sha256(os.fsencode(name)).hexdigest()[:10]


def feedback_name(name: str, taken: set) -> str:
    """``<name>.md`` where that is a plain, short, unused name; else a cleaned stem with a digest of the original
    bytes. ``taken`` (lower-cased names already given) is updated."""
    plain = (
        not _SAFE.search(name)
        and not name.startswith(".")
        and name.isprintable()
        and len(os.fsencode(name)) + 3 <= MAX_FILE_BYTES
    )
    candidate = name + ".md" if plain else None
    if candidate is None or candidate.lower() in taken:
        stem = _SAFE.sub("_", printable(name).replace("\\", "_")).lstrip(".") or "submission"
        while len(stem.encode("utf-8")) > MAX_FILE_BYTES - 16:
            stem = stem[:-1]
        candidate = f"{stem}-{_digest(name)}.md"
        n = 1
        while candidate.lower() in taken:
            candidate, n = f"{stem}-{_digest(name)}-{n}.md", n + 1
    taken.add(candidate.lower())
    return candidate
