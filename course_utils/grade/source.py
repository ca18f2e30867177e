"""Reading submissions (.py or .ipynb) and what can be seen in their source without running it."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from .exercises import EXERCISES, IDS
from .messages import Msg

# this module's texts, key -> (English, Chinese): the catalogue's (messages.py) from here on
TEXTS: dict[str, tuple[str, str]] = {
    "source.at_line": ("{name} (line {line})", "{name}（第 {line} 行）"),
    "source.not_a_submission": (
        "{name}: only .py and .ipynb submissions are graded",
        "{name}：只评 .py 和 .ipynb 文件",
    ),
    "source.cannot_read": ("cannot read {name}: {error}", "无法读取 {name}：{error}"),
    "source.invalid_json": (
        "{name} is not a valid notebook (invalid JSON: {error})",
        "{name} 不是有效的笔记本（JSON 格式错误：{error}）",
    ),
    "source.no_cells": (
        "{name} is not a valid notebook (no list of cells)",
        "{name} 不是有效的笔记本（没有单元格列表）",
    ),
    "source.empty": ("the file is empty", "文件是空的"),
    "source.too_big": (
        "the file is larger than {limit} MiB, more than an exercise needs: not read",
        "文件超过 {limit} MiB，比任何练习需要的都大：没有读取",
    ),
    "source.too_much_code": (
        "the file holds {size} KiB of code, more than the grader reads ({limit} KiB)",
        "文件里有 {size} KiB 代码，超过评分器读取的上限（{limit} KiB）",
    ),
    "source.not_utf8": ("the file is not UTF-8 text (byte {position})", "文件不是 UTF-8 文本（第 {position} 个字节）"),
    "source.too_deep": ("nested too deeply", "嵌套太深"),
    "source.skipped_magic": ("skipped a %%{name} cell (not Python)", "跳过了一个 %%{name} 单元格（不是 Python 代码）"),
    "source.too_big_without_outputs": (
        "the notebook is larger than {limit} MiB without its outputs, more than an exercise needs: not read",
        "去掉输出后笔记本仍大于 {limit} MiB，超出练习所需：未读取",
    ),
}


class SubmissionError(Exception):
    """The submission cannot be read (not a .py/.ipynb file, invalid notebook JSON, ...)."""


# course_utils names a submission may import: the self-check, the book's data, device helpers, plots, and the
# KV-cache size formula (arithmetic that implements no part of any exercise)
ALLOWED_COURSE_NAMES = {
    "grade",
    "check",
    "data",
    "device",
    "viz",
    "book_inputs",
    "book_batch",
    "BOOK_TOKENS",
    "get_device",
    "synchronize",
    "DEVICE_ENV_VAR",
    "kv_cache_bytes",
}
# what the grader's own process reads and parses of one submission, checked before any parse: an exercise notebook
# is under 40 KiB with under 8 KiB of code; a 4 MB literal would cost ast.parse 2 GiB
MAX_FILE_BYTES = 8 << 20
MAX_CODE_BYTES = 128 << 10
# a notebook's file, outputs included (plots, printed tensors): read in chunks, its cells' outputs and attachments
# dropped as they stream past, so that only the rest (MAX_FILE_BYTES at most) is ever held and parsed
MAX_NOTEBOOK_BYTES = 512 << 20
_CHUNK = 1 << 20


def _text(value) -> str:
    """A notebook cell's source: a string, or a list of strings (None and other values are dropped)."""
    if isinstance(value, list):
        return "".join(v if isinstance(v, str) else "" for v in value)
    return value if isinstance(value, str) else ""


def read_cells(path) -> list[dict]:
    """Code cells as [{'index', 'source', 'grade_id'}]; a .py file is one cell. BOM and CRLF are fine."""
    path = Path(path)
    if path.suffix not in (".py", ".ipynb"):
        raise SubmissionError(Msg("source.not_a_submission", name=path.name))
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1) if path.suffix == ".py" else _without_outputs(fh)
    except OSError as exc:
        raise SubmissionError(Msg("source.cannot_read", name=path.name, error=exc.strerror or str(exc))) from None
    if len(data) > MAX_FILE_BYTES:
        raise SubmissionError(
            Msg("source.too_big", limit=MAX_FILE_BYTES >> 20)
            if path.suffix == ".py"
            else Msg("source.too_big_without_outputs", limit=MAX_FILE_BYTES >> 20)
        )
    if not data.strip():
        raise SubmissionError(Msg("source.empty"))
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SubmissionError(Msg("source.not_utf8", position=exc.start)) from None
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if path.suffix == ".py":
        return _bounded([{"index": 0, "source": text, "grade_id": None}])
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SubmissionError(Msg("source.invalid_json", name=path.name, error=str(exc)[:200])) from None
    except RecursionError:  # nesting deeper than the interpreter's stack
        raise SubmissionError(Msg("source.invalid_json", name=path.name, error=Msg("source.too_deep"))) from None
    raw = nb.get("cells") if isinstance(nb, dict) else None
    if not isinstance(raw, list):
        raise SubmissionError(Msg("source.no_cells", name=path.name))
    cells = []
    for i, cell in enumerate(raw):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        metadata = cell.get("metadata")
        nbgrader = metadata.get("nbgrader") if isinstance(metadata, dict) else None
        grade_id = nbgrader.get("grade_id") if isinstance(nbgrader, dict) else None
        cells.append(
            {
                "index": i,
                "source": _text(cell.get("source")),
                "grade_id": grade_id if isinstance(grade_id, str) else None,
            }
        )
    return _bounded(cells)


# the body of a string up to its closing quote (or the chunk's end), and a dropped value's run up to a bracket or a
# string that does not close in this chunk: "unrolled" so that each byte matches one way only, and a string cut by
# the chunk's end costs one pass, not the exponential backtracking of nested repeats
_STRING_BODY = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*', re.S)
_NEXT = re.compile(rb'["{}\[\]:,]')
_SKIPPED_RUN = re.compile(rb'(?:[^"{}\[\]]+|"[^"\\]*(?:\\.[^"\\]*)*")*', re.S)
_DROPPED = {b"outputs": b"[]", b"attachments": b"{}"}  # a cell's keys whose values are not code


def _run_end(run: re.Pattern[bytes], chunk: bytes, pos: int) -> int:
    """Where ``run`` (_STRING_BODY or _SKIPPED_RUN) stops from ``pos``: it matches zero bytes too, so always."""
    m = run.match(chunk, pos)
    assert m is not None
    return m.end()


def _without_outputs(fh) -> bytes:
    """The notebook in ``fh`` with every cell's outputs and attachments emptied, read in chunks: what is dropped
    is never held, so a notebook of 50 MB of plots costs the parent a chunk, not 50 MB (nor json.loads' objects).
    Reads at most MAX_NOTEBOOK_BYTES; stops once what is kept exceeds MAX_FILE_BYTES (the caller refuses it).
    What is not JSON is left for json.loads to name."""
    kept, size, total = [], 0, 0
    stack: list[bytes] = []  # b"{" or b"[" of each open container that is kept
    in_string = escape = at_key = expecting_key = False
    key = last_key = b""  # the key being read, the last key read (its first bytes)
    skip = 0  # depth inside a dropped value (0: keeping)
    while size <= MAX_FILE_BYTES:
        chunk = fh.read(_CHUNK)
        total += len(chunk)
        if total > MAX_NOTEBOOK_BYTES:
            raise SubmissionError(Msg("source.too_big", limit=MAX_NOTEBOOK_BYTES >> 20))
        if not chunk:
            break
        pos, start = 0, (None if skip else 0)  # start: where this chunk's kept part begins
        while pos < len(chunk):
            if in_string:
                if escape:
                    pos, escape = pos + 1, False
                    continue
                end = _run_end(_STRING_BODY, chunk, pos)
                if at_key:
                    key = (key + chunk[pos : min(end, pos + 16)])[:16]
                if end == len(chunk):
                    pos = end
                elif chunk[end : end + 1] == b"\\":  # the chunk ends inside an escape: the next byte is escaped
                    pos, escape = end + 1, True
                else:
                    pos, in_string = end + 1, False
                    if at_key:
                        last_key, at_key = key, False
                continue
            if skip:  # inside a dropped value: only brackets count, strings and the rest are jumped in one match
                pos = _run_end(_SKIPPED_RUN, chunk, pos)
                if pos == len(chunk):
                    break
                c, pos = chunk[pos : pos + 1], pos + 1
                if c == b'"':
                    in_string = True
                else:
                    skip += 1 if c in b"{[" else -1
                    start = pos if skip == 0 else None
                continue
            m = _NEXT.search(chunk, pos)
            if m is None:
                break
            c, pos = m.group(), m.end()
            if c == b'"':
                in_string, key, at_key = True, b"", expecting_key
            elif c in (b"{", b"["):
                if stack == [b"{", b"[", b"{"] and not expecting_key and last_key in _DROPPED:
                    assert start is not None  # keeping (skip == 0): this chunk's kept part has begun
                    kept.append(chunk[start : m.start()] + _DROPPED[last_key])  # a cell's outputs: dropped
                    size += m.start() - start + 2
                    skip, start = 1, None
                else:
                    stack.append(c)
                    expecting_key = c == b"{"
            elif c in (b"}", b"]"):
                if stack:
                    stack.pop()
                expecting_key = False
            else:
                expecting_key = c == b"," and bool(stack) and stack[-1] == b"{"
        if start is not None:
            kept.append(chunk[start:])
            size += len(chunk) - start
    return b"".join(kept)


def _bounded(cells: list[dict]) -> list[dict]:
    """``cells``, or SubmissionError when their code is more than the grader parses."""
    size = sum(len(c["source"].encode("utf-8", "surrogatepass")) for c in cells)
    if size > MAX_CODE_BYTES:
        raise SubmissionError(Msg("source.too_much_code", size=size >> 10, limit=MAX_CODE_BYTES >> 10))
    return cells


# cell magics whose body is Python to run; any other cell magic (%%bash, %%html, ...) is skipped
_PYTHON_CELL_MAGICS = {"time", "timeit", "capture", "prun", "debug"}
_STATEMENT_LINE_MAGICS = {"time", "timeit", "prun"}
_HIDDEN_TESTS = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS[ \t]*$", re.S | re.M)
_LINE_MAGIC = re.compile(r"^(\s*)[%!](\w*)\s*(.*)$")


def prepare_cell(source: str) -> tuple[str, Msg | None]:
    """The Python a cell runs when graded, and a note when something was left out. Line magics and shell
    lines become ``pass`` (``%time stmt`` runs stmt); ``%%time``-like cell magics run their body; other
    cell magics skip the cell."""
    # nbgrader's hidden tests assert on check()'s result in the learner's kernel; here the verdict comes
    # from the parent and check() returns None, so they are left out
    source = _HIDDEN_TESTS.sub("", source)
    lines = source.split("\n")
    first = lines[0].strip() if lines else ""
    if first.startswith("%%"):
        name = first[2:].split()[0] if first[2:].split() else ""
        if name not in _PYTHON_CELL_MAGICS:
            return "", Msg("source.skipped_magic", name=name)
        lines = [""] + lines[1:]  # keep the line numbers
    out = []
    for line in lines:
        m = _LINE_MAGIC.match(line)
        if m and not line.lstrip().startswith("%%"):
            indent, name, rest = m.groups()
            out.append(
                indent + (rest if line.lstrip()[0] == "%" and name in _STATEMENT_LINE_MAGICS and rest else "pass")
            )
        else:
            out.append(line)
    return "\n".join(out), None


def strip_magics(source: str) -> str:
    """The cell as Python, for the static checks (see ``prepare_cell``)."""
    return prepare_cell(source)[0]


def _parse(source):
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # deep nesting, null bytes: not Python to read
        return None


def check_calls(source: str) -> list[tuple[str, str | None]]:
    """(exercise id, name of the checked object) for each ``check("id", Name)`` call in ``source``."""
    tree = _parse(strip_magics(source))
    found = []
    if tree is None:
        return [(m.group(1), m.group(2)) for m in re.finditer(r"\bcheck\(\s*['\"](\w+)['\"]\s*,\s*(\w+)", source)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (
            getattr(node.func, "id", None) == "check" or getattr(node.func, "attr", None) == "check"
        ):
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                name = node.args[1].id if len(node.args) > 1 and isinstance(node.args[1], ast.Name) else None
                found.append((node.args[0].value, name))
    return found


def exercise_from_grade_id(grade_id) -> str | None:
    if not grade_id:
        return None
    for ex in sorted(IDS, key=len, reverse=True):  # mha_interview before mha
        if str(grade_id).startswith(ex):
            return ex
    return None


def find_exercises(cells: list[dict]) -> list[str]:
    """Exercises named by check("id", ...) calls or nbgrader grade_ids, else by their contracts' names (a class or a
    function, as the exercise's kind calls one)."""
    found = []
    for cell in cells:
        ex = exercise_from_grade_id(cell["grade_id"])
        if ex:
            found.append(ex)
        found += [ex for ex, _ in check_calls(cell["source"]) if ex in EXERCISES]
    if not found:
        defined, functions, inits = set(), set(), {}
        for cell in cells:
            tree = _parse(strip_magics(cell["source"]))
            if tree is not None:
                defined |= {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
                functions |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
                inits.update({n.name: _init_parameters(n) for n in tree.body if isinstance(n, ast.ClassDef)})
            else:  # a syntax error: still find the exercise, so that the report can name the error
                defined |= set(re.findall(r"^class\s+(\w+)", cell["source"], re.M))
                functions |= set(re.findall(r"^def\s+(\w+)", cell["source"], re.M))
        found = [
            ex.id
            for ex in EXERCISES.values()
            if ex.how.word == "class"
            and not ex.interview
            and ex.contract in defined
            and not _interview_answer(ex, inits.get(ex.contract))
        ]
        found += [ex.id for ex in EXERCISES.values() if ex.how.word == "function" and ex.contract in functions]
        if not found and defined:
            found = interview_fallback(defined, inits)
    return list(dict.fromkeys(found))


def _init_parameters(node: ast.ClassDef):
    """The names of a class's __init__ parameters after self, "*" for *args, or None without an __init__."""
    for item in node.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            a = item.args
            return [p.arg for p in (a.posonlyargs + a.args)[1:]] + (["*"] if a.vararg else [])
    return None


def _interview_answer(ex, init) -> bool:
    """A class named like ``ex``'s contract whose constructor is not ``ex``'s (all of its arguments but the last,
    in order; a stub's *args is the contract's): an answer to the interview exercise with the same contract."""
    if init is None or "*" in init or not any(o.interview and o.contract == ex.contract for o in EXERCISES.values()):
        return False
    return tuple(init[: len(ex.args) - 1]) != tuple(ex.args[:-1])


def interview_fallback(defined: set, inits: dict) -> list:
    """Interview exercises for a file whose classes are no exercise's contract (or the contract's name with
    another constructor): interview mode grades any nn.Module the file defines."""
    if not any(name in inits for name in defined):
        return []
    return [ex.id for ex in EXERCISES.values() if ex.interview]


def detected_interview(cells: list[dict]) -> list:
    """The interview exercises ``find_exercises`` took by fallback (nothing in the file names them)."""
    named = set()
    for cell in cells:
        named.add(exercise_from_grade_id(cell["grade_id"]))
        named |= {ex for ex, _ in check_calls(cell["source"])}
    return [ex for ex in find_exercises(cells) if EXERCISES[ex].interview and ex not in named]


def course_imports(source: str) -> list[Msg]:
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
                        found.append(_at(a.name, node))
                    elif len(parts) == 1:
                        aliases.add(a.asname or "course_utils")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "course_utils":
            parts = node.module.split(".")
            if len(parts) > 1:
                if parts[1] not in ALLOWED_COURSE_NAMES:
                    found.append(_at(node.module, node))
            else:
                found += [_at(f"course_utils.{a.name}", node) for a in node.names if a.name not in ALLOWED_COURSE_NAMES]
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr not in ALLOWED_COURSE_NAMES
        ):
            found.append(_at(f"course_utils.{node.attr}", node))
    return found


def _at(name: str, node) -> Msg:
    return Msg("source.at_line", name=name, line=node.lineno)
