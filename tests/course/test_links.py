"""Every relative link in the learner's front doors (both READMEs, both notebook indexes, the glossary) lands on a
file, and every #anchor on its heading, on GitHub and inside JupyterLab alike.

The two name headings differently: GitHub lower-cases the heading's text, drops its punctuation and joins words
with "-" ("the-path-through-the-course"); JupyterLab keeps the text as it is, spaces turned into "-"
("The-path-through-the-course"). An anchor must match both, or an explicit ``<a id="..."></a>`` (which both keep).
And it must be ASCII: JupyterLab looks the fragment up percent-encoded, so "#学习路线" opens the file at its top.
A link to a folder opens an "is a directory" error in JupyterLab: links go to files.
The browser test (tests/browser/test_links_in_lab.py) clicks them in a real JupyterLab.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
FRONT_DOORS = ["README.md", "README.zh-CN.md", "notebooks/README.md", "notebooks/zh-CN/README.md", "docs/glossary.md"]

_LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)\)")  # [text](target), [`a`](b) included
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)
_EXPLICIT = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"", re.I)


def links(text: str) -> list[str]:
    """The link targets of a Markdown text, code blocks left out."""
    return _LINK.findall(_FENCE.sub("", text))


def _plain(heading: str) -> str:
    """The text a heading renders to: code marks, emphasis and link targets gone."""
    heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    heading = re.sub(r"<[^>]+>", "", heading)
    return re.sub(r"[`*]|(?<!\w)_|_(?!\w)", "", heading).strip()


def github_id(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", _plain(heading).lower()).replace(" ", "-")


def jupyterlab_id(heading: str) -> str:
    return _plain(heading).replace(" ", "-")


def markdown_of(path: Path) -> str:
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return path.read_text(encoding="utf-8")


def anchors(path: Path) -> set[str]:
    """The anchors that land on a heading of ``path`` on GitHub and in JupyterLab both."""
    text = _FENCE.sub("", markdown_of(path))
    headings = [h for _, h in _HEADING.findall(text)]
    both = {github_id(h) for h in headings} & {jupyterlab_id(h) for h in headings}
    return both | set(_EXPLICIT.findall(text))


def broken(source: str, root: Path = ROOT) -> list[str]:
    """What is wrong with each relative link of ``source`` (a path under ``root``)."""
    path = root / source
    problems = []
    for target in links(path.read_text(encoding="utf-8")):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not ours to resolve
            continue
        file_part, _, fragment = target.partition("#")
        landed = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not landed.exists():
            problems.append(f"{target}: no such file")
        elif landed.is_dir():
            problems.append(f"{target}: a folder (JupyterLab cannot open a folder from a link)")
        elif fragment and not fragment.isascii():
            problems.append(
                f"{target}: JupyterLab looks a fragment up percent-encoded and never finds a non-ASCII one "
                f'(give the heading an ASCII <a id="..."></a>)'
            )
        elif fragment and unquote(fragment) not in anchors(landed):
            problems.append(
                f"{target}: no heading {unquote(fragment)!r} in {landed.relative_to(root)} that GitHub "
                f'and JupyterLab both name so (add <a id="{unquote(fragment)}"></a> above it)'
            )
    return list(dict.fromkeys(problems))


@pytest.mark.parametrize("source", FRONT_DOORS)
def test_every_link_lands_on_a_file_or_its_heading(source):
    assert links((ROOT / source).read_text(encoding="utf-8")), f"{source}: no links found (is the parser broken?)"
    problems = broken(source)
    assert not problems, f"{source}:\n  " + "\n  ".join(problems)


def test_heading_ids_follow_github_and_jupyterlab():
    assert github_id("Which PyTorch `make setup` installs") == "which-pytorch-make-setup-installs"
    assert jupyterlab_id("Which PyTorch `make setup` installs") == "Which-PyTorch-make-setup-installs"
    assert github_id("The Chinese edition (中文版)") == "the-chinese-edition-中文版"
    assert github_id("贡献者：让中英文版保持同步") == "贡献者让中英文版保持同步"
    assert jupyterlab_id("给教师") == github_id("给教师") == "给教师"


def test_the_checker_finds_what_broke(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text('# Top\n\n## Two words\n\n<a id="kept"></a>\n## Mixed Case\n')
    (tmp_path / "b.md").write_text(
        "[x](docs/a.md#two-words) [y](docs/) [z](docs/a.md#kept) [w](docs/a.md#gone) "
        "[v](missing.md) [u](https://example.org/x) [t](#top) [s](docs/a.md#中文)\n"
    )
    problems = broken("b.md", root=tmp_path)
    assert [p.split(":")[0] for p in problems] == [
        "docs/a.md#two-words",
        "docs/",
        "docs/a.md#gone",
        "missing.md",
        "#top",
        "docs/a.md#中文",
    ], problems
