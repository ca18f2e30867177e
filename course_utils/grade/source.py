"""Reading submissions (.py or .ipynb) and what can be seen in their source without running it."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from .specs import CONTRACT_CLASS, EXERCISES, INTERVIEW
from .specs_capstone import CONTRACT_FUNCTION
from .specs_capstone import EXERCISES as FUNCTION_EXERCISES  # capstone hook: function exercises


class SubmissionError(Exception):
    """The submission cannot be read (not a .py/.ipynb file, invalid notebook JSON, ...)."""


# course_utils names a submission may import: the self-check, the book's data, device helpers, plots, and the
# KV-cache size formula (arithmetic that implements no part of any exercise)
ALLOWED_COURSE_NAMES = {"grade", "check", "data", "device", "viz", "book_inputs", "book_batch", "BOOK_TOKENS",
                        "get_device", "synchronize", "DEVICE_ENV_VAR", "kv_cache_bytes"}
FORBIDDEN_IN_INTERVIEW = {"scaled_dot_product_attention", "MultiheadAttention", "multi_head_attention_forward"}
_MAGIC = re.compile(r"^\s*[%!]")


def read_cells(path) -> list[dict]:
    """Code cells as [{'index', 'source', 'grade_id'}]; a .py file is one cell."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SubmissionError(f"cannot read {path.name}: {exc}") from None
    if path.suffix == ".py":
        return [{"index": 0, "source": text, "grade_id": None}]
    if path.suffix != ".ipynb":
        raise SubmissionError(f"{path.name}: only .py and .ipynb submissions are graded")
    try:
        nb = json.loads(text)
        raw = nb["cells"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise SubmissionError(f"{path.name} is not a valid notebook (invalid JSON: {exc})") from None
    cells = []
    for i, cell in enumerate(raw):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else str(src)
        grade_id = (cell.get("metadata") or {}).get("nbgrader", {}).get("grade_id")
        cells.append({"index": i, "source": src, "grade_id": grade_id})
    return cells


def strip_magics(source: str) -> str:
    """Drop IPython magics and shell lines (cell magics drop the whole cell)."""
    if source.lstrip().startswith("%%"):
        return ""
    return "\n".join("" if _MAGIC.match(line) else line for line in source.splitlines())


def _parse(source):
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


def assigned_names(source: str) -> list[str]:
    """Names a cell binds at its top level with plain assignments (``result = check(...)``)."""
    tree = _parse(source)
    if tree is None:
        return []
    names = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names += [t.id for t in targets if isinstance(t, ast.Name)]
    return names


def check_calls(source: str) -> list[tuple[str, str | None]]:
    """(exercise id, name of the checked object) for each ``check("id", Name)`` call in ``source``."""
    tree = _parse(strip_magics(source))
    found = []
    if tree is None:
        return [(m.group(1), m.group(2)) for m in re.finditer(r"\bcheck\(\s*['\"](\w+)['\"]\s*,\s*(\w+)", source)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (getattr(node.func, "id", None) == "check"
                                           or getattr(node.func, "attr", None) == "check"):
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                name = node.args[1].id if len(node.args) > 1 and isinstance(node.args[1], ast.Name) else None
                found.append((node.args[0].value, name))
    return found


def is_check_cell(source: str) -> bool:
    return bool(check_calls(source)) or bool(re.search(r"\bcheck\(", source))


def exercise_from_grade_id(grade_id) -> str | None:
    if not grade_id:
        return None
    for ex in sorted(EXERCISES + FUNCTION_EXERCISES, key=len, reverse=True):  # mha_interview before mha
        if str(grade_id).startswith(ex):
            return ex
    return None


def find_exercises(cells: list[dict]) -> list[str]:
    """Exercises named by check("id", ...) calls or nbgrader grade_ids, else by the contract class names."""
    found = []
    for cell in cells:
        ex = exercise_from_grade_id(cell["grade_id"])
        if ex:
            found.append(ex)
        found += [ex for ex, _ in check_calls(cell["source"]) if ex in EXERCISES + FUNCTION_EXERCISES]
    if not found:
        defined, functions = set(), set()
        for cell in cells:
            tree = _parse(strip_magics(cell["source"]))
            if tree is not None:
                defined |= {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
                functions |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
            else:  # a syntax error: still find the exercise, so that the report can name the error
                defined |= set(re.findall(r"^class\s+(\w+)", cell["source"], re.M))
                functions |= set(re.findall(r"^def\s+(\w+)", cell["source"], re.M))
        found = [ex for ex in EXERCISES if ex not in INTERVIEW and CONTRACT_CLASS[ex] in defined]
        found += [ex for ex in FUNCTION_EXERCISES if CONTRACT_FUNCTION[ex] in functions]
    return list(dict.fromkeys(found))


def course_imports(source: str) -> list[str]:
    """Reference implementations of course_utils that ``source`` imports or uses ('name (line N)')."""
    tree = _parse(strip_magics(source))
    if tree is None:
        return []
    found, aliases = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "course_utils":
                    if len(parts) > 1 and parts[1] not in ALLOWED_COURSE_NAMES:
                        found.append(f"{a.name} (line {node.lineno})")
                    elif len(parts) == 1:
                        aliases.add(a.asname or "course_utils")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "course_utils":
            parts = node.module.split(".")
            if len(parts) > 1:
                if parts[1] not in ALLOWED_COURSE_NAMES:
                    found.append(f"{node.module} (line {node.lineno})")
            else:
                found += [f"course_utils.{a.name} (line {node.lineno})" for a in node.names
                          if a.name not in ALLOWED_COURSE_NAMES]
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr not in ALLOWED_COURSE_NAMES):
            found.append(f"course_utils.{node.attr} (line {node.lineno})")
    return found


def interview_violations(source: str, class_line: int | None = None) -> list[str]:
    """Uses of SDPA / nn.MultiheadAttention in ``source`` (only in the class at ``class_line`` if given)."""
    tree = _parse(strip_magics(source))
    if tree is None:
        return []
    scope = tree
    if class_line is not None:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.lineno <= class_line <= (node.end_lineno or node.lineno):
                scope = node
    found = []
    for node in ast.walk(scope):
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        if name in FORBIDDEN_IN_INTERVIEW:
            found.append(f"{name} (line {node.lineno})")
        if isinstance(node, ast.ImportFrom):
            found += [f"{a.name} (line {node.lineno})" for a in node.names if a.name in FORBIDDEN_IN_INTERVIEW]
    return list(dict.fromkeys(found))
