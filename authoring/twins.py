"""The Chinese edition (中文版): every English notebook has a twin in a ``zh-CN`` folder beside it, with the same code.

A twin holds its English notebook's cells in the same order with the same ids. Code cells are copies (source and
cell metadata; their outputs come from running the twin, in Chinese). Markdown cells hold the Chinese text of the
English cell with the same id, written for Chinese readers rather than word for word; their metadata ``twin.en``
holds a hash of the English text they render, so a change on the English side is noticed. A twin may add markdown
cells of its own: their ids start with ``zh-`` and they stay after the cell they follow.

``python -m authoring.twins sync`` rebuilds every twin from its English notebook: code from the English side,
markdown kept by id. A markdown cell the English side added is copied in English and marked
``"twin": {"todo": "translate"}``; one whose English text changed keeps its Chinese and is marked
``"todo": "update"``. Whoever translates it deletes the ``todo`` (``git diff`` on the English notebook shows what
changed). A twin that is missing is created that way. ``--execute changed`` then runs the twins whose code
changed (``--execute all``: every twin).
To translate, ``python -m authoring.twins export TWIN > cells.md`` writes the twin's markdown cells (and, for
context, its code) as text with a ``<!-- cell ID -->`` line before each; edit the text under the markdown cells' lines
(add a cell of your own with a new ``<!-- cell zh-... -->`` line) and ``python -m authoring.twins import TWIN
cells.md`` puts it back and clears those cells' ``todo``. ``python -m authoring.twins check`` writes nothing and
exits 1 when a twin is missing, stale, untranslated or has no English notebook. ``exercises/zh-CN`` is made from
``solutions/zh-CN`` by the exercise generator (``authoring.exercises``).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import re
import sys
from pathlib import Path

from authoring import KERNELSPEC

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("notebooks", "solutions")
ZH = "zh-CN"
OWN_PREFIX = "zh-"  # ids of markdown cells that only the Chinese edition has
TWIN_META = "twin"  # markdown cell metadata: {"en": hash of the English source, "todo": ...}
NB_META = "attention_by_hand"  # notebook metadata: {"lang": "zh-CN"}
_RUN_META = ("execution", "collapsed", "scrolled")


def english_notebooks(root: Path = ROOT) -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (root / folder).glob("*.ipynb"))


def twin_path(english: Path) -> Path:
    return english.parent / ZH / english.name


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def dump(nb: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def english_hash(cell) -> str:
    """A short hash of an English markdown cell's text: the twin records which text it translates."""
    return hashlib.sha1(_source(cell).encode("utf-8")).hexdigest()[:12]


def _code_meta(cell) -> dict:
    return {k: v for k, v in cell.get("metadata", {}).items() if k not in _RUN_META}


def assemble(english: dict, twin: dict | None) -> tuple[dict, bool]:
    """The twin rebuilt from ``english`` and the current ``twin`` (or None); and whether any code changed."""
    old = {c.get("id"): c for c in (twin or {}).get("cells", [])}
    own_after = {}  # id of the cell a Chinese-only cell follows -> those cells, in order
    previous = None
    for cell in (twin or {}).get("cells", []):
        if str(cell.get("id", "")).startswith(OWN_PREFIX):
            own_after.setdefault(previous, []).append(cell)
        else:
            previous = cell.get("id")
    cells, code_changed = list(own_after.get(None, [])), twin is None
    for cell in english["cells"]:
        cid, mine = cell.get("id"), old.get(cell.get("id"))
        if not cid:
            raise ValueError("an English cell has no id; save the notebook with nbformat >= 4.5")
        if cell["cell_type"] == "markdown":
            en = english_hash(cell)
            if mine is not None and mine["cell_type"] == "markdown":
                new = copy.deepcopy(mine)
                twin_meta = dict(mine.get("metadata", {}).get(TWIN_META, {}))
                if twin_meta.get("en") != en and "todo" not in twin_meta:
                    twin_meta["todo"] = "update"
            else:
                new, twin_meta = copy.deepcopy(cell), {"todo": "translate"}
            twin_meta["en"] = en
            new["metadata"] = {**copy.deepcopy(cell.get("metadata", {})), TWIN_META: twin_meta}
        elif cell["cell_type"] == "code":
            same = (
                mine is not None
                and mine["cell_type"] == "code"
                and _source(mine) == _source(cell)
                and _code_meta(mine) == _code_meta(cell)
            )
            # the same code keeps the twin's own cell, its run's timings included (not the English notebook's); new
            # code takes the English cell's metadata without the timings, as execute() saves a twin
            new = copy.deepcopy(mine if same else cell)
            new["source"] = copy.deepcopy(cell["source"])
            meta = mine.get("metadata", {}) if same else cell.get("metadata", {})
            new["metadata"] = copy.deepcopy({k: v for k, v in meta.items() if same or k != "execution"})
            code_changed |= not same
        else:  # raw cells are copied
            new = copy.deepcopy(cell)
        cells.append(new)
        cells.extend(own_after.get(cid, []))
    code_changed |= [c.get("id") for c in cells if c["cell_type"] == "code"] != [
        c.get("id") for c in (twin or {}).get("cells", []) if c["cell_type"] == "code"
    ]
    meta = copy.deepcopy(english.get("metadata", {}))
    if twin is not None and "widgets" in twin.get("metadata", {}):
        meta["widgets"] = copy.deepcopy(twin["metadata"]["widgets"])
    else:
        meta.pop("widgets", None)
    meta[NB_META] = {"lang": ZH}
    meta["kernelspec"] = dict(KERNELSPEC)  # what JupyterLab writes: opening a twin leaves it unchanged
    out = {k: copy.deepcopy(v) for k, v in english.items() if k not in ("cells", "metadata")}
    out.update(cells=cells, metadata=meta)
    if twin is not None:  # the twin's order of keys: a twin that changes is written back in the order it had
        out = {**{k: out[k] for k in twin if k in out}, **out}
        meta_order = twin.get("metadata", {})
        out["metadata"] = {**{k: meta[k] for k in meta_order if k in meta}, **meta}
    return out, code_changed


def _comparable(nb: dict) -> list:
    """What ``check`` compares: cells without outputs and run metadata, and the notebook's metadata sans widgets."""
    cells = [
        {
            **{k: v for k, v in c.items() if k not in ("outputs", "execution_count")},
            "source": _source(c),
            "metadata": _code_meta(c),
        }
        for c in nb["cells"]
    ]
    meta = {k: v for k, v in nb.get("metadata", {}).items() if k != "widgets"}
    return [cells, meta]


def problems(root: Path = ROOT) -> list[str]:
    """Everything wrong with the twins under ``root``: missing, stale, untranslated, orphaned."""
    found = []
    englishes = english_notebooks(root)
    for english in englishes:
        twin = twin_path(english)
        rel = twin.relative_to(root)
        if not twin.exists():
            found.append(f"{rel} is missing: run `make twins`, then translate it")
            continue
        current = load(twin)
        wanted, _ = assemble(load(english), current)
        if _comparable(current) != _comparable(wanted):
            found.append(
                f"{rel} differs from {english.relative_to(root)} in its code or its cells' order and ids: "
                "run `make twins`"
            )
        for what in ("translate", "update"):
            todo = [c["id"] for c in current["cells"] if c.get("metadata", {}).get(TWIN_META, {}).get("todo") == what]
            if todo:
                found.append(
                    f"{rel}: markdown cell(s) {', '.join(todo)} to {what} "
                    f"({'still English' if what == 'translate' else 'the English text changed'})"
                )
    names = {twin_path(e) for e in englishes}
    for folder in FOLDERS:
        for orphan in sorted((root / folder / ZH).glob("*.ipynb")):
            if orphan not in names:
                found.append(f"{orphan.relative_to(root)} has no English notebook in {folder}/")
    return found


_BLOCK = re.compile(r"^<!-- (cell|code) (\S+)(?: [^>]*)? -->$", re.M)


def export(path: Path) -> str:
    """The twin's cells as editable text: markdown under ``<!-- cell ID -->``, code (not imported) under
    ``<!-- code ID -->``."""
    parts = []
    for cell in load(path)["cells"]:
        if cell["cell_type"] == "markdown":
            todo = cell.get("metadata", {}).get(TWIN_META, {}).get("todo")
            parts.append(f"<!-- cell {cell['id']}{' todo: ' + todo if todo else ''} -->\n{_source(cell).strip()}\n")
        elif cell["cell_type"] == "code":
            parts.append(
                f"<!-- code {cell['id']} (context only, not imported) -->\n```python\n{_source(cell).strip()}\n```\n"
            )
    return "\n".join(parts)


def _own_cell_metadata(cells, cid) -> dict:
    """A Chinese-only cell of an nbgrader notebook (solutions/) is locked prose, like the notebook's other markdown."""
    if not any("nbgrader" in c.get("metadata", {}) for c in cells):
        return {}
    return {
        "nbgrader": {
            "grade": False,
            "grade_id": cid,
            "locked": True,
            "schema_version": 3,
            "solution": False,
            "task": False,
        }
    }


def import_text(path: Path, text: str) -> list[str]:
    """Put the markdown of ``text`` (as written by ``export``) into the twin at ``path``; returns the ids set."""
    nb = load(path)
    cells, by_id = nb["cells"], {c.get("id"): c for c in nb["cells"]}
    marks = list(_BLOCK.finditer(text))
    done, after = [], None
    for i, m in enumerate(marks):
        kind, cid = m.group(1), m.group(2)
        body = text[m.end() : marks[i + 1].start() if i + 1 < len(marks) else len(text)].strip("\n")
        if kind == "code":
            if cid not in by_id:
                raise ValueError(f"code cell {cid} is not in {path.name}")
            after = cid
            continue
        lines = body.splitlines(keepends=True)
        if lines:
            lines[-1] = lines[-1].rstrip("\n")
        cell = by_id.get(cid)
        if cell is None:
            if not cid.startswith(OWN_PREFIX):
                raise ValueError(
                    f"markdown cell {cid} is not in {path.name}; a cell of the Chinese edition's own "
                    f"needs an id starting with {OWN_PREFIX!r}"
                )
            cell = {"cell_type": "markdown", "id": cid, "metadata": _own_cell_metadata(cells, cid), "source": []}
            at = cells.index(by_id[after]) + 1 if after else 0
            cells.insert(at, cell)
            by_id[cid] = cell
        elif cell["cell_type"] != "markdown":
            raise ValueError(f"cell {cid} of {path.name} is a code cell: its text comes from the English notebook")
        if not body.strip():
            raise ValueError(f"markdown cell {cid} is empty in the text")
        cell["source"] = lines
        cell.get("metadata", {}).get(TWIN_META, {}).pop("todo", None)
        done.append(cid)
        after = cid
    dump(nb, path)
    return done


def run_notebook(path: Path, timeout: int = 120, allow_errors: bool = False):
    """Run the notebook at ``path`` top to bottom in a fresh python3 kernel started in the notebook's folder (so a
    twin speaks Chinese); returns the executed nbformat node. With ``allow_errors`` a cell's error is recorded in its
    outputs instead of raised."""
    import nbformat
    import zmq
    from nbclient import NotebookClient
    from traitlets.config import Config

    nb = nbformat.read(str(path), as_version=nbformat.NO_CONVERT)
    # curve-encrypted transport: a plain-TCP kernel warns about eavesdropping on stderr
    config = Config({"KernelManager": {"transport_encryption": "auto" if zmq.has("curve") else "disabled"}})
    NotebookClient(
        nb,
        kernel_name="python3",
        config=config,
        timeout=timeout,
        allow_errors=allow_errors,
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    return nb


def execute(path: Path, timeout: int = 120) -> None:
    """Run the notebook at ``path`` in its own folder and save it with its outputs (no per-run timings)."""
    import nbformat

    data = json.loads(nbformat.writes(run_notebook(path, timeout)))
    for cell in data["cells"]:
        cell.get("metadata", {}).pop("execution", None)
    dump(data, path)


def sync(root: Path = ROOT, run: str = "changed") -> list[Path]:
    """Rebuild every twin; run those whose code changed (``run``: 'changed', 'all' or 'none'). Returns the changed."""
    changed = []
    for english in english_notebooks(root):
        twin = twin_path(english)
        current = load(twin) if twin.exists() else None
        new, code_changed = assemble(load(english), current)
        if new != current:
            dump(new, twin)
        if code_changed:
            changed.append(twin)
    if run != "none":
        for twin in english_notebooks(root) if run == "all" else changed:
            twin = twin if twin.parent.name == ZH else twin_path(twin)
            print(f"running {twin.relative_to(root)}", flush=True)
            execute(twin)
    return changed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m authoring.twins", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("sync", "check", "export", "import"))
    parser.add_argument("paths", nargs="*", type=Path, help="export: TWIN; import: TWIN TEXT")
    parser.add_argument(
        "--execute",
        choices=("changed", "all", "none"),
        default="none",
        help="sync: which twins to run afterwards (default none)",
    )
    args = parser.parse_args(argv)
    if args.command in ("export", "import"):
        if len(args.paths) != {"export": 1, "import": 2}[args.command]:
            parser.error("export TWIN, or import TWIN TEXT")
        try:
            if args.command == "export":
                sys.stdout.write(export(args.paths[0]))
            else:
                done = import_text(args.paths[0], args.paths[1].read_text(encoding="utf-8"))
                print(f"{len(done)} markdown cell(s) set in {args.paths[0]}")
        except (ValueError, OSError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        return 0
    if args.command == "sync":
        changed = sync(run=args.execute)
        print(f"{len(changed)} twin(s) with new code" + "".join(f"\n  {p.relative_to(ROOT)}" for p in changed))
    found = problems()
    if found:
        print("the Chinese twins need work:\n  " + "\n  ".join(found), file=sys.stderr)
        return 1
    if args.command == "check":
        print("every notebook has an up-to-date Chinese twin")
    return 0


if __name__ == "__main__":
    sys.exit(main())
