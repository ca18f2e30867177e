"""The Chinese edition (中文版): every notebook has a twin in zh-CN/ with the same code and Chinese prose.

How twins are made and kept current is in authoring/twins.py's docstring; `make twins` does it.
"""

import copy
import json
import re
from pathlib import Path

import pytest

from authoring import exercises as gen
from authoring import twins
from course_utils import lang

ROOT = Path(__file__).resolve().parents[2]
TWINS = [twins.twin_path(p) for p in twins.english_notebooks()]

CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef]")
LATIN = re.compile(r"[A-Za-z]")
_HAN = CJK.pattern
# a paragraph's line ending in a Chinese character and the next line going on with one, emphasis marks aside (lists,
# tables, headings, HTML and code start new blocks and do not count)
WRAPPED = re.compile(
    rf"^(?![ \t]*(?:[-+|#<>]|\*\s|\d+\.|```|\$\$)).*{_HAN}[*_`]*\n"
    rf"(?![ \t]*(?:[-+|#<>]|\*\s|\d+\.\s|```|\$\$))[ \t]*[*_`]*{_HAN}",
    re.M,
)
# what is not prose: fenced code, inline code, math, link targets, HTML tags, URLs
NOT_PROSE = [
    re.compile(p, re.S)
    for p in (r"```.*?```", r"`[^`\n]*`", r"\$\$.*?\$\$", r"\$[^$\n]+\$", r"\]\([^)]*\)", r"<[^>\n]+>", r"https?://\S+")
]


def prose(markdown: str) -> str:
    for pattern in NOT_PROSE:
        markdown = pattern.sub(" ", markdown)
    return markdown


def markdown_cells(path):
    return [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "markdown"]


def test_every_notebook_has_an_up_to_date_translated_twin():
    """Missing, stale (code or cells differ from the English notebook), untranslated or orphaned twins."""
    found = twins.problems()
    assert not found, "run `make twins` and translate:\n" + "\n".join(found)


def test_make_twins_leaves_the_checkout_as_it_is():
    """Rebuilding every twin of the checkout changes none (`make twins` writes only what changed): the English
    notebook's run metadata (nbconvert's timings) does not travel into its twin."""
    rewritten = []
    for english in twins.english_notebooks():
        twin = twins.twin_path(english)
        if twins.assemble(twins.load(english), twins.load(twin))[0] != twins.load(twin):
            rewritten.append(str(twin.relative_to(ROOT)))
    assert not rewritten, f"`make twins` would rewrite twins it has nothing to change in: {rewritten}"


def test_a_twin_keeps_its_own_run_metadata():
    english = copy.deepcopy(ENGLISH)
    english["cells"][1]["metadata"] = {"execution": {"shell.execute_reply": "English run"}, "tags": ["t"]}
    twin = _translated()
    twin["cells"][1]["metadata"] = {"execution": {"shell.execute_reply": "twin's run"}, "tags": ["t"]}
    rebuilt, changed = twins.assemble(english, twin)
    assert not changed and rebuilt["cells"][1]["metadata"] == twin["cells"][1]["metadata"]
    english["cells"][1]["source"] = "x = 2"  # new code: the twin runs again and records its own run then
    assert twins.assemble(english, twin)[0]["cells"][1]["metadata"] == {"tags": ["t"]}


def test_chinese_exercises_are_generated_from_the_chinese_solutions():
    stale = gen.generate(ROOT / "solutions" / "zh-CN", ROOT / "exercises" / "zh-CN", check=True)
    assert not stale, "run `make exercises`: " + "; ".join(stale)


@pytest.mark.parametrize("path", TWINS, ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_twin_prose_is_chinese(path):
    """Mostly Chinese, not English with a few terms: more Chinese characters than Latin letters in the prose
    (code, math and links aside), and no markdown cell with a sentence's worth of English and no Chinese."""
    cells = markdown_cells(path)
    cjk = sum(len(CJK.findall(prose("".join(c["source"])))) for c in cells)
    latin = sum(len(LATIN.findall(prose("".join(c["source"])))) for c in cells)
    assert cjk > latin, f"{path.name}: {cjk} Chinese characters, {latin} Latin letters in its prose"
    english = [
        c["id"]
        for c in cells
        if len(LATIN.findall(prose("".join(c["source"])))) >= 40 and not CJK.search("".join(c["source"]))
    ]
    assert not english, f"{path.name}: markdown cells without Chinese: {english}"
    # Markdown turns a line break into a space, which shows between two Chinese characters: no break there
    broken = [c["id"] for c in cells if WRAPPED.search("".join(c["source"]))]
    assert not broken, f"{path.name}: a paragraph broken between two Chinese characters in cells {broken}"


def _relative_links(markdown):
    for target in re.findall(r"\]\(([^)\s]+)\)", markdown):
        if not re.match(r"[a-z]+:|#", target):
            yield target.split("#")[0]


@pytest.mark.parametrize("path", TWINS + twins.english_notebooks(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    """A twin sits one folder deeper than its English notebook: every relative link must still resolve."""
    broken = [
        t for c in markdown_cells(path) for t in _relative_links("".join(c["source"])) if not (path.parent / t).exists()
    ]
    assert not broken, f"{path.relative_to(ROOT)}: broken links {broken}"


# ------------------------------------------------------------------------------------------------------
# the mechanism, on small notebooks


def _nb(*cells):
    return {
        "cells": [
            {
                "cell_type": t,
                "id": i,
                "metadata": {},
                "source": s,
                **({"outputs": [], "execution_count": None} if t == "code" else {}),
            }
            for t, i, s in cells
        ],
        "metadata": {"kernelspec": {"name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


ENGLISH = _nb(("markdown", "a", "# Title"), ("code", "b", "x = 1"), ("markdown", "c", "Some prose."))


def _translated():
    twin, _ = twins.assemble(ENGLISH, None)
    for cell in twin["cells"]:
        if cell["cell_type"] == "markdown":
            cell["source"] = "中文：" + cell["source"]
            cell["metadata"]["twin"].pop("todo")
    return twin


def test_a_new_twin_is_english_marked_to_translate():
    twin, changed = twins.assemble(ENGLISH, None)
    assert changed and twin["metadata"]["attention_by_hand"] == {"lang": "zh-CN"}
    assert [c["metadata"].get("twin", {}).get("todo") for c in twin["cells"]] == ["translate", None, "translate"]


def test_code_comes_from_english_and_chinese_prose_stays():
    english = copy.deepcopy(ENGLISH)
    english["cells"][1]["source"] = "x = 2"
    twin, changed = twins.assemble(english, _translated())
    assert changed and twin["cells"][1]["source"] == "x = 2"
    assert twin["cells"][0]["source"] == "中文：# Title" and "todo" not in twin["cells"][0]["metadata"]["twin"]
    assert twins.assemble(ENGLISH, _translated())[1] is False  # nothing to re-run when the code is the same


def test_changed_english_prose_marks_the_chinese_cell_to_update():
    english = copy.deepcopy(ENGLISH)
    english["cells"][2]["source"] = "Other prose."
    twin, _ = twins.assemble(english, _translated())
    assert twin["cells"][2]["source"] == "中文：Some prose."  # kept until someone updates it
    assert twin["cells"][2]["metadata"]["twin"]["todo"] == "update"
    again, _ = twins.assemble(english, twin)  # the mark survives another sync
    assert again["cells"][2]["metadata"]["twin"]["todo"] == "update"


def test_cells_of_the_chinese_edition_stay_after_their_cell_and_removed_cells_go():
    twin = _translated()
    twin["cells"].insert(2, {"cell_type": "markdown", "id": "zh-interview", "metadata": {}, "source": "面试怎么问"})
    english = copy.deepcopy(ENGLISH)
    english["cells"].insert(0, {"cell_type": "markdown", "id": "new", "metadata": {}, "source": "New."})
    del english["cells"][3]
    rebuilt, _ = twins.assemble(english, twin)
    assert [c["id"] for c in rebuilt["cells"]] == ["new", "a", "b", "zh-interview"]


def test_export_and_import_round_trip_and_refuse_mistakes(tmp_path):
    path = tmp_path / "zh-CN" / "n.ipynb"
    twins.dump(twins.assemble(ENGLISH, None)[0], path)
    text = twins.export(path)
    assert "<!-- cell a todo: translate -->" in text and "<!-- code b" in text
    text = text.replace("# Title", "# 标题").replace("Some prose.", "一些文字。")
    text += "\n<!-- cell zh-extra -->\n只有中文版有的一格\n"
    assert twins.import_text(path, text) == ["a", "c", "zh-extra"]
    nb = twins.load(path)
    assert [("".join(c["source"]), c["metadata"].get("twin", {}).get("todo")) for c in nb["cells"]] == [
        ("# 标题", None),
        ("x = 1", None),
        ("一些文字。", None),
        ("只有中文版有的一格", None),
    ]
    graded = tmp_path / "zh-CN" / "graded.ipynb"  # in an nbgrader notebook a cell of its own is locked prose
    twins.dump(
        _nb(("markdown", "a", "x"))
        | {"cells": [{"cell_type": "markdown", "id": "a", "source": "x", "metadata": {"nbgrader": {"locked": True}}}]},
        graded,
    )
    twins.import_text(graded, "<!-- cell a -->\n文字\n<!-- cell zh-box -->\n面试官会怎么问\n")
    assert twins.load(graded)["cells"][1]["metadata"]["nbgrader"]["locked"] is True
    with pytest.raises(ValueError, match="starting with 'zh-'"):
        twins.import_text(path, "<!-- cell extra -->\n文字\n")
    with pytest.raises(ValueError, match="is a code cell"):
        twins.import_text(path, "<!-- cell b -->\ny = 2\n")


def test_problems_name_missing_stale_untranslated_and_orphaned_twins(tmp_path):
    for folder in twins.FOLDERS:
        (tmp_path / folder / "zh-CN").mkdir(parents=True)
    twins.dump(ENGLISH, tmp_path / "notebooks" / "n.ipynb")
    twins.dump(ENGLISH, tmp_path / "solutions" / "s.ipynb")
    stale = _translated()
    stale["cells"][1]["source"] = "x = 3"
    twins.dump(stale, tmp_path / "notebooks" / "zh-CN" / "n.ipynb")
    twins.dump(ENGLISH, tmp_path / "solutions" / "zh-CN" / "orphan.ipynb")
    found = "\n".join(twins.problems(tmp_path))
    assert "notebooks/zh-CN/n.ipynb differs" in found
    assert "solutions/zh-CN/s.ipynb is missing" in found and "orphan.ipynb has no English notebook" in found
    twins.sync(tmp_path, run="none")
    found = "\n".join(twins.problems(tmp_path))
    assert "differs" not in found and "is missing" not in found
    assert "s.ipynb: markdown cell(s) a, c to translate" in found


# ------------------------------------------------------------------------------------------------------
# which language the course speaks


@pytest.fixture
def no_language(monkeypatch):
    monkeypatch.delenv(lang.LANG_ENV_VAR, raising=False)
    lang.set_language(None)
    yield
    lang.set_language(None)


def test_language_follows_the_folder_the_environment_and_the_call(tmp_path, monkeypatch, no_language):
    (tmp_path / "zh-CN").mkdir()
    monkeypatch.chdir(tmp_path)
    assert lang.current_language() == "en"
    monkeypatch.chdir(tmp_path / "zh-CN")
    assert lang.current_language() == "zh"
    monkeypatch.setenv(lang.LANG_ENV_VAR, "en")
    assert lang.current_language() == "en"
    lang.set_language("zh_CN")
    assert lang.current_language() == "zh" and lang.pick("key", "键") == "键" and lang.pick("key", "键", "en") == "key"


def test_an_unknown_language_is_a_clear_error(no_language, monkeypatch):
    monkeypatch.setenv(lang.LANG_ENV_VAR, "fr")
    with pytest.raises(ValueError, match="unknown language 'fr'"):
        lang.current_language()


def test_a_twin_carries_the_kernelspec_jupyterlab_writes():
    """An English notebook saved as "Python 3" still gives a twin JupyterLab leaves unchanged on opening."""
    from authoring import KERNELSPEC

    english = copy.deepcopy(ENGLISH)
    english["metadata"]["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    assert twins.assemble(english, None)[0]["metadata"]["kernelspec"] == KERNELSPEC


def _timed(nb, stamp):
    """``nb`` as a run left it: its code cells' execution metadata (timings) say ``stamp``."""
    nb = copy.deepcopy(nb)
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["metadata"]["execution"] = {"iopub.status.idle": stamp}
    return nb


def test_a_sync_leaves_the_twins_of_unchanged_notebooks_byte_identical(tmp_path):
    # each edition keeps its own run's timings, and its keys in the order they were saved
    (tmp_path / "notebooks" / "zh-CN").mkdir(parents=True)
    (tmp_path / "solutions").mkdir()
    for name in ("same", "changed"):
        twins.dump(_timed(ENGLISH, "english run"), tmp_path / "notebooks" / f"{name}.ipynb")
        twin = _timed(_translated(), "twin run")
        twin = {"cells": twin.pop("cells"), **twin}  # the cells first, unlike the English notebook
        twins.dump(twin, tmp_path / "notebooks" / "zh-CN" / f"{name}.ipynb")
    english = _timed(ENGLISH, "english run")
    english["cells"][1]["source"] = "x = 2"
    twins.dump(english, tmp_path / "notebooks" / "changed.ipynb")
    before = {p.name: p.read_bytes() for p in (tmp_path / "notebooks" / "zh-CN").glob("*.ipynb")}
    changed = twins.sync(tmp_path, run="none")
    assert changed == [tmp_path / "notebooks" / "zh-CN" / "changed.ipynb"]
    assert (tmp_path / "notebooks" / "zh-CN" / "same.ipynb").read_bytes() == before["same.ipynb"]
    rewritten = twins.load(tmp_path / "notebooks" / "zh-CN" / "changed.ipynb")
    assert rewritten["cells"][1]["source"] == "x = 2" and "execution" not in rewritten["cells"][1]["metadata"]
    assert list(rewritten)[0] == "cells" and twins.problems(tmp_path) == []
