"""Generate the exercise notebooks from their solutions: ``python -m authoring.exercises solutions exercises``.

``solutions/`` is the single source. Each notebook there becomes an exercise notebook of the same name:

* code between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` becomes a stub at the marker's indentation,
  ``# YOUR CODE HERE`` and ``raise NotImplementedError(...)`` (nbgrader style). At the top level of a
  cell (indentation 0) the stub is the comment alone: a bare top-level raise would break "Run All",
  and the self-check already reports a missing class as not implemented;
* markdown between the same markers becomes ``YOUR ANSWER HERE``;
* code between ``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS`` is removed;
* outputs, execution counts and execution timings are cleared.

Cell ids and nbgrader cell metadata are kept, and the output is a pure function of the input, so
diffs stay clean. ``--check`` writes nothing and exits with 1 when the exercises are out of date.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import nbformat

from authoring import KERNELSPEC

BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
CODE_STUB = ("# YOUR CODE HERE", 'raise NotImplementedError("your code here")')
MARKDOWN_STUB = "YOUR ANSWER HERE"
_MARKER = re.compile(r"^(\s*)(### (?:BEGIN|END) (?:SOLUTION|HIDDEN TESTS))\s*$")
# per-run metadata that must not leak into the generated notebooks
_CELL_META_DROP = ("execution", "collapsed", "scrolled")
_NB_META_DROP = ("widgets",)


def _replace_regions(lines, begin, end, stub, where):
    """Replace each begin..end region (markers included) with ``stub(indent)``; check the markers pair up."""
    out, indent, start = [], None, 0
    for i, line in enumerate(lines):
        m = _MARKER.match(line)
        marker = m.group(2) if m else None
        if marker == begin:
            if indent is not None:
                raise ValueError(f"{where}: line {i + 1}: {begin!r} inside another region opened on line {start + 1}")
            indent, start = m.group(1), i
        elif marker == end:
            if indent is None:
                raise ValueError(f"{where}: line {i + 1}: {end!r} without {begin!r}")
            out.extend(stub(indent))
            indent = None
        elif indent is None:
            out.append(line)
    if indent is not None:
        raise ValueError(f"{where}: line {start + 1}: {begin!r} is never closed by {end!r}")
    return out


def _code_stub(indent):
    return [indent + CODE_STUB[0]] if indent == "" else [indent + s for s in CODE_STUB]


def _has(source, marker):
    return any((m := _MARKER.match(line)) and m.group(2) == marker for line in source.splitlines())


def make_exercise(nb, name: str = "notebook"):
    """Return the exercise version of solution notebook ``nb`` (an nbformat node; ``nb`` is not modified)."""
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))  # deep copy
    if (nb.nbformat, nb.nbformat_minor) < (4, 5):
        raise ValueError(f"{name}: nbformat {nb.nbformat}.{nb.nbformat_minor} has no cell ids; save it as 4.5 or later")
    for key in _NB_META_DROP:
        nb.metadata.pop(key, None)
    nb.metadata.kernelspec = dict(KERNELSPEC)  # what JupyterLab writes: opening an exercise leaves it unchanged
    for cell in nb.cells:
        cell_id = cell.get("id")
        if not cell_id:
            raise ValueError(f"{name}: a cell has no id; save the notebook with nbformat >= 4.5")
        where = f"{name}, cell {cell_id!r}"
        meta = cell.metadata.get("nbgrader", {})
        has_solution, has_hidden = _has(cell.source, BEGIN_SOLUTION), _has(cell.source, BEGIN_HIDDEN)
        if has_solution and not meta.get("solution"):
            raise ValueError(f"{where}: has {BEGIN_SOLUTION!r} but its nbgrader metadata lacks solution=true")
        if has_hidden and not meta.get("grade"):
            raise ValueError(f"{where}: has {BEGIN_HIDDEN!r} but its nbgrader metadata lacks grade=true")
        lines = cell.source.splitlines()
        if cell.cell_type == "code":
            lines = _replace_regions(lines, BEGIN_SOLUTION, END_SOLUTION, _code_stub, where)
            lines = _replace_regions(lines, BEGIN_HIDDEN, END_HIDDEN, lambda indent: [], where)
            while lines and not lines[-1].strip():  # no trailing blank lines left by a removed region
                lines.pop()
            cell.outputs, cell.execution_count = [], None
        elif cell.cell_type == "markdown":
            lines = _replace_regions(lines, BEGIN_SOLUTION, END_SOLUTION, lambda indent: [MARKDOWN_STUB], where)
        cell.source = "\n".join(lines)
        for key in _CELL_META_DROP:
            cell.metadata.pop(key, None)
    return nb


def render(path: Path) -> str:
    """The exercise notebook for solution notebook ``path``, as the text to write."""
    nb = nbformat.read(str(path), as_version=nbformat.NO_CONVERT)
    exercise = make_exercise(nb, path.name)
    nbformat.validate(exercise)
    return nbformat.writes(exercise) + "\n"


def generate(src: Path, dst: Path, check: bool = False) -> list[str]:
    """Write (or with ``check``, only compare) ``dst/*.ipynb`` from ``src/*.ipynb``; return what differs."""
    sources = sorted(src.glob("*.ipynb"))
    if not sources:
        raise ValueError(f"no notebooks in {src}")
    stale = []
    for path in sources:
        text, target = render(path), dst / path.name
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if current is None or json.loads(current) != json.loads(text):  # same content, whatever the formatting
            stale.append(f"{target} {'is missing' if current is None else 'is out of date'}")
            if not check:
                dst.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
    names = {p.name for p in sources}
    for extra in sorted(dst.glob("*.ipynb")):
        if extra.name not in names:
            stale.append(f"{extra} has no solution notebook in {src}")
            if not check:
                extra.unlink()
    return stale


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m authoring.exercises", description=__doc__.split("\n")[0])
    parser.add_argument("solutions", type=Path, help="folder of solution notebooks (the source)")
    parser.add_argument("exercises", type=Path, help="folder to write the exercise notebooks to")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the exercises are out of date")
    args = parser.parse_args(argv)
    try:
        stale = generate(args.solutions, args.exercises, check=args.check)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.check:
        if stale:
            print("exercises are out of date; run `make exercises`:\n  " + "\n  ".join(stale), file=sys.stderr)
            return 1
        print(f"{args.exercises} is up to date")
    else:
        print(f"{len(stale)} notebook(s) updated in {args.exercises}" + "".join(f"\n  {s}" for s in stale))
    return 0


if __name__ == "__main__":
    sys.exit(main())
