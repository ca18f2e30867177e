"""Prose is checked too: every number a notebook's markdown states must also appear in its code.

The rule (CONTRIBUTING.md, "Prose is checked"): a number in a markdown cell must occur in the same notebook in
the source of a code cell or in a committed output that nbval compares (not the output of a cell starting with
`# NBVAL_IGNORE_OUTPUT`). So a number in the prose is either written into the code that computes or asserts it,
or printed by a cell whose output nbval checks; when it stops being true, nbval or this test fails.

Not numbers in this sense, and skipped: digits inside names (`float16`, `W_q`, `GPT-2`, `Llama-3-8B`, `H100`),
heading and list numbering, references to notebooks, sections, exercises, chapters, random seeds, bugs and
questions ("notebook 05", "exercise 3.2"), and years after an author ("Shazeer 2019"). Thousands separators and
underscores are ignored, and `5%` also matches `0.05`. This is a tripwire, not a proof: reviewers still check that
the code cell next to a claim asserts it.
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# the English notebooks and their Chinese twins (notebooks/zh-CN, same code, Chinese prose)
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) + sorted(
    (ROOT / "notebooks" / "zh-CN").glob("[0-9][0-9]_*.ipynb")
)

_NUMBER = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?"
# in prose: not glued to a name on the left (float16, W_q2, GPT-2) or on the right (7B, H100, x2); a trailing
# %, x or × (a ratio) is allowed
PROSE_NUMBER = re.compile(rf"(?<![\w.])(?<![A-Za-z_]-)(?<![A-Za-z_]\^)({_NUMBER})(\s?%|x|×)?(?![\w])")
# in code and outputs: anything that is not the tail of an identifier
CODE_NUMBER = re.compile(r"(?<![A-Za-z_])(\d[\d_,]*(?:\.\d+)?(?:[eE][-+]?\d+)?)")
SKIP = [
    re.compile(r"^\s*#+\s*\d+(\.\d+)*\.?", re.M),  # heading numbers: "## 4. Spot the bug"
    re.compile(r"^\s*\d+\.\s", re.M),  # numbered list items
    re.compile(r"<summary>\s*\d+\.", re.I),  # numbered questions
    re.compile(
        r"\b(?:notebooks?|sections?|exercises?|chapters?|seeds?|bugs?|questions?|steps? of)\s+"
        r"\d+(?:\.\d+)?(?:\s*(?:-|–|,|and|or)\s*\d+(?:\.\d+)?)*",
        re.I,
    ),
    re.compile(r"(?:et al\.|[A-Z][a-z]+),? \(?(?:19|20)\d\d\b"),  # a citation's year, "Olsson et al. (2022)" too
    re.compile(r"https?://\S+"),
    re.compile(r"\[\d+ · "),  # the "next steps" link to the next notebook: "[11 · Capstone ...](11_capstone.ipynb)"
    # the same references in Chinese: "笔记本 05", "练习 3.2", "随机种子 123", "第 3 章", "问题 2"
    re.compile(
        r"(?:笔记本|练习|种子|小节|问题|习题|步骤)\s*\d+(?:\.\d+)?"
        r"(?:\s*(?:-|–|~|、|,|，|和|与|或|至|到)\s*\d+(?:\.\d+)?)*"
    ),
    re.compile(r"第\s*\d+(?:\.\d+)?\s*(?:章|节|步|题|课|篇|部分|个笔记本)"),
]
# Chinese characters are word characters to the regex engine: a number next to one ("6 个") must still count
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def _value(text):
    return float(text.replace(",", "").replace("_", ""))


def prose_numbers(markdown):
    """(text, value, is_percent) for every number the markdown states, after the SKIP rules."""
    for pattern in SKIP:
        markdown = pattern.sub(" ", markdown)
    markdown = _CJK.sub(" ", markdown)
    return [
        (m.group(0).strip(), _value(m.group(1)), (m.group(2) or "").strip() == "%")
        for m in PROSE_NUMBER.finditer(markdown)
    ]


def _output_text(cell):
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append("".join(out.get("text", "")))
        for mime in ("text/plain", "text/markdown", "text/html"):
            data = out.get("data", {}).get(mime)
            if data:
                parts.append("".join(data))
    return "\n".join(parts)


def code_values(nb):
    """Every number in the code cells' sources and in the outputs that nbval compares."""
    values = set()
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        texts = [source]
        if not source.lstrip().startswith("# NBVAL_IGNORE_OUTPUT"):
            texts.append(_output_text(cell))
        for text in texts:
            for m in CODE_NUMBER.finditer(text):
                token = m.group(1).rstrip(",_")
                try:
                    values.add(_value(token))
                except ValueError:
                    continue
    return values


def _found(value, is_percent, values):
    candidates = [value] + ([value / 100] if is_percent else [])
    return any(abs(v - c) <= 1e-9 * max(1.0, abs(c)) for c in candidates for v in values)


def unbacked_numbers(nb):
    values = code_values(nb)
    missing = []
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        for text, value, is_percent in prose_numbers("".join(cell["source"])):
            if not _found(value, is_percent, values):
                missing.append(f"cell {index}: {text!r}")
    return missing


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT / "notebooks")))
def test_every_number_in_the_prose_is_computed(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    missing = unbacked_numbers(nb)
    assert not missing, (
        f"{path.name}: numbers stated in markdown that no code cell computes, asserts or prints in a checked "
        "output (see CONTRIBUTING.md, 'Prose is checked'):\n" + "\n".join(missing)
    )


def test_the_rule_itself():
    skipped = prose_numbers(
        "## 4. Spot the bug\n1. float16, GPT-2, Llama-3-8B, H100 and d_k (notebook 05, exercise 3.2, Shazeer 2019)"
    )
    assert skipped == []
    stated = prose_numbers("2,362,368 parameters, cut 4x, about 5 % of it, `-1e9`, weights 13-16 GB")
    assert [(t, v) for t, v, _ in stated] == [
        ("2,362,368", 2362368.0),
        ("4x", 4.0),
        ("5 %", 5.0),
        ("1e9", 1e9),
        ("13", 13.0),
        ("16", 16.0),
    ]
    nb = {
        "cells": [
            {"cell_type": "markdown", "source": ["It has 2,362,368 parameters, 5% of them biases, and 28 M more."]},
            {"cell_type": "code", "source": ["assert n == 2_362_368\nshare = 0.05"], "outputs": []},
            {
                "cell_type": "code",
                "source": ["# NBVAL_IGNORE_OUTPUT\nprint(m)"],
                "outputs": [{"output_type": "stream", "name": "stdout", "text": ["28 M\n"]}],
            },
        ]
    }
    assert unbacked_numbers(nb) == ["cell 0: '28'"]  # an unchecked output does not count


def test_the_rule_in_chinese():
    assert prose_numbers("见笔记本 05 和练习 3.2，第 3 章，随机种子 123，问题 2") == []
    stated = prose_numbers("一共 6 个 token，缓存小了 97%，约4倍")
    assert [(t, v) for t, v, _ in stated] == [("6", 6.0), ("97%", 97.0), ("4", 4.0)]


# the course's authors worked from notes learners never see: a notebook names the pattern instead ("a common answer
# in interview-prep notes does ...") and shows it in the course's own code
OUTSIDE_MATERIAL = re.compile(r"seed notes?\b|seed 0\d\d\b|seed material|\bthe seed's|种子笔记|种子材料|种子代码", re.I)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_words_from_material_learners_do_not_have(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    found = [
        f"cell {i}: {m.group(0)!r}"
        for i, cell in enumerate(nb["cells"])
        for m in OUTSIDE_MATERIAL.finditer("".join(cell["source"]) + _output_text(cell))
    ]
    assert not found, f"{path.name} refers to notes learners do not have: " + ", ".join(found)
