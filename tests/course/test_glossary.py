"""The glossary, docs/glossary.md (术语表): every term of the course in English and Chinese, and linked from everywhere.

Its tables have the columns | English | 中文 | first met in | short note (中文) |. The tests fail when
(a) a "key terms" pair of notebooks/README.md is missing from it,
(b) an English notebook's markdown (notebooks/, solutions/) writes a Chinese term that no row's 中文 column holds,
(c) a row's "first met in" link points to no file,
(d) a README or a notebook (English or its zh-CN twin, exercises included) does not link to it in its first cell.
Plain text and JSON only: no torch, well under a second.
"""

import json
import re
from pathlib import Path

import pytest

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
