"""A live figure still answers its controls after Run All.

``viz.live_figure(draw, ...)`` calls ``draw`` again whenever a control moves, long after its cell ran: by then Run All
has run every later cell, and ``draw`` reads the notebook's globals as the LAST cell left them. A later cell that
rebinds a name ``draw`` reads (notebook 16's colour table, once) turns every move of a slider into an exception in
the kernel's log and a figure that no longer changes; nbval runs each cell once and never sees it, and the browser
test moves only the first control of one figure per notebook. So: no name a live figure's draw reads (itself, or the
notebook's functions it calls) is bound again by a later cell, unless by the same import.
"""

from __future__ import annotations

import ast
import builtins
import json
from pathlib import Path

import pytest

from course_utils.grade.source import strip_magics

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "notebooks" / "zh-CN").glob("*.ipynb"))


def _cells(path: Path) -> list[ast.Module | None]:
    """Each code cell parsed (as the grader reads it: IPython's magics and shell lines made Python), None for markdown
    or what does not parse."""
    parsed: list[ast.Module | None] = []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "code":
            parsed.append(None)
            continue
        try:
            parsed.append(ast.parse(strip_magics("".join(cell["source"]))))
        except SyntaxError:
            parsed.append(None)
    return parsed


def _bound_at_top(tree: ast.Module) -> dict[str, str]:
    """Names a cell binds at module level -> how (an import keeps its own text: the same import again is harmless)."""
    bound: dict[str, str] = {}

    def targets(node) -> list[str]:
        return [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]

    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                bound[(alias.asname or alias.name).split(".")[0]] = ast.unparse(node)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound[node.name] = "def"
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.For | ast.With):
            for name in targets(node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else node):
                bound[name] = "assign"
    return bound


def _free_names(func: ast.FunctionDef | ast.Lambda) -> set[str]:
    """The global names a function reads: loaded names that are not its parameters, its locals or builtins."""
    args = func.args
    params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    params |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    local = {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    local |= {n.name for n in ast.walk(func) if isinstance(n, ast.FunctionDef) and n is not func}
    local |= {a.arg for a in ast.walk(func) if isinstance(a, ast.arg)}  # nested functions and lambdas too
    loaded = {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return loaded - params - local - set(dir(builtins))


def _draws(tree: ast.Module):
    """The first argument of each live_figure(...) call in the cell."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name == "live_figure":
                yield node.args[0]


def _problems(path: Path) -> list[str]:
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    cells = _cells(path)
    defs: dict[str, ast.FunctionDef] = {}  # the notebook's functions as the cells so far define them
    found = []
    for index, tree in enumerate(cells):
        if tree is None:
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                defs[node.name] = node
        for draw in _draws(tree):
            func = draw if isinstance(draw, ast.Lambda) else defs.get(getattr(draw, "id", ""))
            if func is None:
                continue
            read, todo, seen = set(), [func], set()
            while todo:  # the draw function and the notebook's functions it calls, as they stand at this cell
                f = todo.pop()
                for name in _free_names(f):
                    read.add(name)
                    if name in defs and name not in seen:
                        seen.add(name)
                        todo.append(defs[name])
            if isinstance(draw, ast.Name):
                read.add(draw.id)
            before: dict[str, str] = {}
            for earlier in cells[: index + 1]:
                if earlier is not None:
                    before.update(_bound_at_top(earlier))
            for later_index, later in enumerate(cells[index + 1 :], start=index + 1):
                if later is None:
                    continue
                for name, how in _bound_at_top(later).items():
                    if name in read and not (how not in ("def", "assign") and before.get(name) == how):
                        found.append(
                            f"{where}: the live figure of cell {index} reads {name!r}, which cell "
                            f"{later_index} binds again: after Run All, moving a control draws with cell "
                            f"{later_index}'s {name}; give one of them a name of its own"
                        )
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT / "notebooks")))
def test_no_later_cell_rebinds_what_a_live_figure_reads(path):
    problems = _problems(path)
    assert not problems, "\n".join(problems)


def test_the_check_sees_the_fault_it_was_written_for(tmp_path):
    """Notebook 16's fault as it was: the draw function reads COLORS, a later cell assigns COLORS."""
    source = [
        "COLORS = {'a': 'tab:blue'}\ndef draw(x):\n    return COLORS['a'], x\n",
        "live_figure(draw, x=1)\n",
        "COLORS = ['tab:red']\n",
    ]
    nb = {"cells": [{"cell_type": "code", "source": s} for s in source]}
    path = tmp_path / "probe.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    problems = _problems(path)
    assert len(problems) == 1 and "'COLORS'" in problems[0] and "cell 2" in problems[0], problems
