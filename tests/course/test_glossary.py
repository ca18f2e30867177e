"""The glossary, docs/glossary.md (术语表): every term of the course in English and Chinese, and linked from everywhere.

Its tables have the columns | English | 中文 | first met in | short note (中文) |. The tests fail when
(a) a "key terms" pair of notebooks/README.md is missing from it,
(b) an English notebook's markdown (notebooks/, solutions/) writes a Chinese term that no row's 中文 column holds,
(c) a row's "first met in" link points to no file,
(d) a README or a notebook (English or its zh-CN twin, exercises included) does not link to it in its first cell.
Plain text and JSON only: no torch, well under a second.
"""

import ast
import json
import re
from pathlib import Path

import pytest

from tests.course.test_learner_words import output_texts

ROOT = Path(__file__).resolve().parents[2]
GLOSSARY = ROOT / "docs" / "glossary.md"
COLUMNS = ("English", "中文", "first met in", "short note (中文)")
ZH = "zh-CN"
NOTEBOOK_FOLDERS = ("notebooks", "solutions", "exercises")

CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
LINK_TARGET = re.compile(r"\]\(([^)\s]+)\)")
# the line every first cell ends with; its 术语表 names the glossary, it is not a term written inline
GLOSSARY_LINK_TEXT = re.compile(r"\[glossary · 术语表\]\([^)]*\)")
# Chinese in English prose that is not a term, so needs no row. Keep it small, and say why for each.
NOT_TERMS = {
    "中文": "the language's name, as in 'English and Chinese (中文)'",
    "中文版": "the Chinese edition's name",
}


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def glossary_rows() -> list[dict]:
    """The rows of every glossary table, as dicts with the keys of COLUMNS (plus 'line', for messages)."""
    rows, header = [], None
    for number, line in enumerate(GLOSSARY.read_text(encoding="utf-8").splitlines(), 1):
        if not line.startswith("|"):
            header = None
            continue
        cells = _cells(line)
        if header is None:
            header = tuple(cells)
        elif header == COLUMNS and not set(line) <= set("|-: "):
            row = dict(zip(COLUMNS, cells, strict=True))
            row["line"], row["width"] = number, len(cells)
            rows.append(row)
    return rows


ROWS = glossary_rows()


def _norm_en(text: str) -> str:
    """Lowercase, no code marks or brackets, hyphens as spaces: 'Weight split(s)' matches 'weight splits'."""
    text = text.lower().replace("`", "").replace("(", "").replace(")", "").replace("-", " ")
    return " ".join(text.split())


def _norm_zh(text: str) -> str:
    return " ".join(text.split())


def _english_markdown(path: Path) -> str:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return "\n\n".join(
        "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        for c in nb["cells"]
        if c["cell_type"] == "markdown"
    )


def test_glossary_tables_are_well_formed():
    assert len(ROWS) >= 100, f"only {len(ROWS)} rows in {GLOSSARY.name}: are the tables' headers {COLUMNS}?"
    bad = [f"line {r['line']}: {r['width']} cells (a '|' inside a cell?)" for r in ROWS if r["width"] != len(COLUMNS)]
    bad += [f"line {r['line']}: the 中文 column has no Chinese" for r in ROWS if not CJK_RUN.search(r["中文"])]
    bad += [f"line {r['line']}: empty English column" for r in ROWS if not r["English"]]
    seen = {}
    for r in ROWS:
        key = _norm_en(r["English"])
        if key in seen:
            bad.append(f"line {r['line']}: '{r['English']}' is already on line {seen[key]}")
        seen.setdefault(key, r["line"])
    assert not bad, "\n".join(bad)


def readme_key_terms() -> list[tuple[str, str]]:
    """The "key terms" column of notebooks/README.md's table: (notebook, item) for each 'English 中文' item."""
    items, column = [], None
    for line in (ROOT / "notebooks" / "README.md").read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            column = None
            continue
        cells = _cells(line)
        if column is None:
            column = cells.index("key terms") if "key terms" in cells else -1
        elif column >= 0 and not set(line) <= set("|-: "):
            items += [(cells[0], item.strip()) for item in cells[column].split(",") if item.strip()]
    return items


def _pair_in_glossary(item: str) -> bool:
    """Whether some row holds the item's English in its English column and its Chinese in its 中文 column.
    The item's Chinese may start with Latin words ('KV cache KV 缓存'), so every split point is tried."""
    words = item.split()
    for k in range(len(words) - 1, 0, -1):
        english, chinese = " ".join(words[:k]), " ".join(words[k:])
        if CJK_RUN.search(english) or not CJK_RUN.search(chinese):
            continue
        if any(_norm_en(english) in _norm_en(r["English"]) and _norm_zh(chinese) in _norm_zh(r["中文"]) for r in ROWS):
            return True
    return False


def test_every_key_term_of_the_notebooks_index_is_in_the_glossary():
    items = readme_key_terms()
    assert len(items) >= 30, "notebooks/README.md's table lost its 'key terms' column?"
    missing = [f"notebook {nb}: {item}" for nb, item in items if not _pair_in_glossary(item)]
    assert not missing, f"key terms of notebooks/README.md without a matching row in {GLOSSARY.name}:\n" + "\n".join(
        missing
    )


ENGLISH_NOTEBOOKS = sorted(p for folder in ("notebooks", "solutions") for p in (ROOT / folder).glob("*.ipynb"))


def test_every_chinese_term_in_the_english_notebooks_is_in_the_glossary():
    chinese = " ".join(r["中文"] for r in ROWS)
    missing = {}
    for path in ENGLISH_NOTEBOOKS:
        text = GLOSSARY_LINK_TEXT.sub(" ", _english_markdown(path))
        for run in CJK_RUN.findall(text):
            if run not in NOT_TERMS and run not in chinese:
                missing.setdefault(run, []).append(str(path.relative_to(ROOT)))
    assert not missing, (
        f"Chinese terms written in English notebooks but in no 中文 cell of {GLOSSARY.name} "
        "(add a row, or to NOT_TERMS if it is not a term):\n"
        + "\n".join(f"{run}: {', '.join(sorted(set(where)))}" for run, where in sorted(missing.items()))
    )


def test_every_first_met_in_link_exists():
    bad = []
    for r in ROWS:
        links = LINK_TARGET.findall(r["first met in"])
        if not links:
            bad.append(f"line {r['line']} ({r['English']}): no link")
        elif not any(ZH in link for link in links):
            bad.append(f"line {r['line']} ({r['English']}): no link to the Chinese edition")
        for link in links:
            if not (GLOSSARY.parent / link.split("#")[0]).resolve().is_file():
                bad.append(f"line {r['line']} ({r['English']}): {link} does not exist")
    assert not bad, "\n".join(bad)


def _links_glossary(text: str, base: Path) -> tuple[bool, bool]:
    """(some link ends in docs/glossary.md, some such link resolves to the glossary from ``base``)."""
    targets = [t.split("#")[0] for t in LINK_TARGET.findall(text) if t.split("#")[0].endswith("docs/glossary.md")]
    return bool(targets), any((base / t).resolve() == GLOSSARY.resolve() for t in targets)


@pytest.mark.parametrize("name", ["README.md", "README.zh-CN.md"])
def test_readme_links_the_glossary(name):
    named, resolves = _links_glossary((ROOT / name).read_text(encoding="utf-8"), ROOT)
    assert named and resolves, f"{name} does not link docs/glossary.md"


def course_notebooks() -> list[Path]:
    return sorted(p for folder in NOTEBOOK_FOLDERS for sub in ("", ZH) for p in (ROOT / folder / sub).glob("*.ipynb"))


def test_every_notebook_links_the_glossary_in_its_first_cell():
    """English notebooks and translated twins need a link that resolves from their folder; a twin whose first cell
    is still the English text (marked todo) carries the English link, ../docs/glossary.md, until it is translated."""
    paths = course_notebooks()
    assert len(paths) >= 33, f"only {len(paths)} notebooks found"
    bad = []
    for path in paths:
        first = json.loads(path.read_text(encoding="utf-8"))["cells"][0]
        source = "".join(first["source"]) if isinstance(first["source"], list) else first["source"]
        named, resolves = _links_glossary(source, path.parent)
        untranslated = path.parent.name == ZH and first.get("metadata", {}).get("twin", {}).get("todo") == "translate"
        if not named:
            bad.append(f"{path.relative_to(ROOT)}: its first cell does not link docs/glossary.md")
        elif not resolves and not untranslated:
            bad.append(
                f"{path.relative_to(ROOT)}: its first cell's glossary link does not lead to docs/glossary.md "
                "from its folder (from a zh-CN folder: ../../docs/glossary.md)"
            )
    hint = "\n(exercises/ out of date? `make exercises`; twins: `make twins`)" if bad else ""
    assert not bad, "\n".join(bad) + hint


# --- terms hold course-wide: the renderings a row rejects appear in no Chinese text --------------------------------
#
# A row's note may end with "不用：“X”、“Y”" (do not write X or Y for this term), each rejected rendering optionally
# followed by "（例外：“A……B”）": a phrase that contains X but is not the term ("……" stands for any words within one
# clause). Every Chinese text a learner reads is searched: the zh-CN notebooks, exercises and solutions (markdown and
# committed outputs), the Chinese READMEs and indexes, and every string in course_utils (the grader's messages, the
# figures' labels, the errors the references raise).

REJECTED_LIST = re.compile(r"不用：((?:“[^”]+”(?:（例外：“[^”]+”[^）]*）)?(?:、|(?=[；。（]|\s*$)))+)")
REJECTED_ITEM = re.compile(r"“([^”]+)”(?:（例外：“([^”]+)”[^）]*）)?")
CLAUSE = "[^，。！？；：\n]*?"  # what "……" stands for in an exception: words within one clause


def rejected_renderings() -> list[tuple[str, re.Pattern | None, dict]]:
    """(rejected text, pattern of its allowed exception or None, its glossary row) for every row that lists one."""
    found = []
    for row in ROWS:
        for clause in REJECTED_LIST.findall(row["short note (中文)"]):
            for text, exception in REJECTED_ITEM.findall(clause):
                allowed = re.compile(CLAUSE.join(map(re.escape, exception.split("……")))) if exception else None
                found.append((text, allowed, row))
    return found


def rejected_in(text: str) -> list[tuple[str, str]]:
    """(rejected rendering, the line it is on) for each rejected rendering in ``text`` outside its exceptions."""
    hits = []
    for rejected, allowed, row in rejected_renderings():
        for line in text.splitlines():
            spared = allowed.sub(lambda m: "\0" * len(m.group(0)), line) if allowed else line
            if rejected in spared:
                hits.append((f"{rejected} (glossary: {row['English']} = {row['中文']})", line.strip()[:140]))
    return hits


def chinese_texts():
    """(where, text) for every Chinese text a learner reads (see above)."""
    for folder in NOTEBOOK_FOLDERS:
        for path in sorted((ROOT / folder / ZH).glob("*.ipynb")):
            for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
                if cell["cell_type"] == "markdown":
                    yield f"{path.relative_to(ROOT)} cell {i}", "".join(cell["source"])
                for text in output_texts(cell):
                    yield f"{path.relative_to(ROOT)} cell {i} output", text
    for path in [ROOT / "README.zh-CN.md", ROOT / "CONTRIBUTING.zh-CN.md", *sorted(ROOT.glob("*/zh-CN/*.md"))]:
        yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")
    for path in sorted((ROOT / "course_utils").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and CJK_RUN.search(node.value):
                yield f"{path.relative_to(ROOT)} line {node.lineno}", node.value


def test_the_rejected_renderings_are_read_from_the_glossary():
    found = {text: allowed for text, allowed, _ in rejected_renderings()}
    for text in ("对数和指数", "键维切分", "主存（HBM）", "GPU 的主存", "上训练"):
        assert text in found, f"the glossary no longer rejects {text!r}"
    assert rejected_in("然后对两个模型各上训练 100 步")
    assert not rejected_in("在归纳任务上训练一个两层 GPT"), "'在……上训练' (trained on) is not uptraining"
    assert rejected_in("在 MHA 之后，再上训练 100 步"), "an exception reaches no further than its clause"


def test_no_chinese_text_uses_a_rejected_rendering():
    bad = [f"{where}: {term} in {line!r}" for where, text in chinese_texts() for term, line in rejected_in(text)]
    assert not bad, "renderings the glossary rejects (docs/glossary.md, 不用：...):\n" + "\n".join(bad)


def test_no_chinese_term_is_glossed_with_itself():
    """'**块表**（块表 / block table）' repeats the term where the English belongs."""
    names = [name.strip() for r in ROWS for name in re.split(r"[，、（）；()]", re.sub(r"`[^`]*`", "", r["中文"]))]
    terms = {name for name in names if CJK_RUN.fullmatch(name)}
    bad = []
    for where, text in chinese_texts():
        for term in terms:
            for match in re.finditer(re.escape(term) + r"\**[（(]\s*" + re.escape(term) + r"(?=\s*[/／，,）)])", text):
                bad.append(f"{where}: {text[max(0, match.start() - 20) : match.end() + 20]!r}")
    assert not bad, "a Chinese term glossed with itself instead of its English:\n" + "\n".join(bad)
