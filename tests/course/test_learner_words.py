"""Learner-facing text never refers to material learners do not have: the notes the course was written from
("seed note 003", "种子笔记"), internal issue or pull-request numbers. Learners have the notebooks, exercises,
solutions, READMEs, indexes, glossary and docs/; every word of those (markdown, code, comments and committed
outputs) is read here, and each offending line is listed with its file and cell.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# what learners cannot look up; "random seed" (随机种子), torch.manual_seed(0) and the like stay allowed
OUTSIDE = re.compile(
    r"\bseed[- ]notes?\b|\bseeds? 0\d\d\b|\bseed 0\d\d's\b|\bsource notes?\b|\bseed (?:file|set)s?\b"
    r"|种子笔记|种子 ?0\d\d|源笔记"
    r"|\b(?:issue|pull request|PR)s? #?\d+\b|(?<![\w&/])#\d{2,4}\b(?![\w-])",
    re.I,
)


def learner_files() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "README.zh-CN.md"]
    for folder in ("notebooks", "exercises", "solutions"):
        found += sorted((ROOT / folder).rglob("*.ipynb")) + sorted((ROOT / folder).rglob("*.md"))
    found += sorted((ROOT / "docs").rglob("*.md"))
    return [p for p in found if ".ipynb_checkpoints" not in p.parts]


def _texts(path: Path):
    """(where, text) for each part of ``path`` a learner reads."""
    if path.suffix != ".ipynb":
        yield "", path.read_text(encoding="utf-8")
        return
    for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        yield f"cell {i}", "".join(cell["source"])
        for text in output_texts(cell):
            yield f"cell {i} output", text


def output_texts(cell: dict) -> list[str]:
    """The text of each of a cell's committed outputs: a stream's, or a result's plain text ("" for neither)."""
    texts = []
    for out in cell.get("outputs", []):
        text = out.get("text") or out.get("data", {}).get("text/plain") or ""
        texts.append("".join(text) if isinstance(text, list) else text)
    return texts


def offenders(paths) -> list[str]:
    found = []
    for path in paths:
        for where, text in _texts(path):
            for number, line in enumerate(text.splitlines(), start=1):
                for match in OUTSIDE.finditer(line):
                    place = f"{path.relative_to(ROOT)}" + (f" {where}" if where else "") + f" line {number}"
                    found.append(f"{place}: {match.group(0)!r} in {line.strip()[:120]!r}")
    return found


def test_the_pattern_finds_outside_material_and_spares_seeds():
    for said in (
        "seed note 003",
        "seed 000's view(B, S, D) bug",
        "seed 001's layout",
        "种子笔记 001",
        "见种子 002",
        "fixed in issue 27",
        "(#31)",
        "PR 12",
        "source note 004",
    ):
        assert OUTSIDE.search(said), said
    for fine in (
        "torch.manual_seed(0)",
        "seed = 1234",
        "a fresh secret seed",
        "随机种子",
        "seed 7",
        "#1f77b4",
        "## 3. Heading",
        "cell 12",
        "C#",
        "&#8203;",
    ):
        assert not OUTSIDE.search(fine), fine


def test_learner_facing_text_names_nothing_learners_do_not_have():
    files = learner_files()
    assert len(files) > 60, [str(p) for p in files]  # notebooks, twins, exercises, solutions, READMEs, docs
    found = offenders(files)
    assert not found, f"{len(found)} mention(s) of material learners do not have:\n  " + "\n  ".join(found)
