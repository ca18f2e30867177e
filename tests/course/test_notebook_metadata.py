"""Opening a notebook in JupyterLab leaves it unchanged on disk: every committed notebook (notebooks/, solutions/,
exercises/, both languages) carries the kernelspec and language_info JupyterLab writes when it starts ipykernel's
python3 kernel for it. A notebook saved as "Python 3" (JupyterLab's name is "Python 3 (ipykernel)") is rewritten and
autosaved, so a learner who only read it finds `git status` dirty and `git pull` refuses to update
(tests/browser/test_open_leaves_checkout_clean.py checks it in a real JupyterLab). Plain JSON, well under a second.
"""

import json
from pathlib import Path

import pytest
from ipykernel.ipkernel import IPythonKernel
from ipykernel.kernelspec import get_kernel_dict

from authoring import KERNELSPEC

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(p for folder in ("notebooks", "solutions", "exercises") for p in (ROOT / folder).rglob("*.ipynb"))
NOTEBOOKS = [p for p in NOTEBOOKS if ".ipynb_checkpoints" not in p.parts]


def _metadata(path):
    return json.loads(path.read_text(encoding="utf-8"))["metadata"]


def test_the_tools_write_the_kernelspec_of_ipykernels_python3():
    spec = get_kernel_dict()
    assert KERNELSPEC == {"name": "python3", "display_name": spec["display_name"], "language": spec["language"]}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_notebook_has_the_metadata_jupyterlab_writes(path):
    meta = _metadata(path)
    assert meta.get("kernelspec") == KERNELSPEC, (
        f"kernelspec {meta.get('kernelspec')}: JupyterLab writes {KERNELSPEC} when it opens the notebook, then "
        "autosaves it (fix the file's metadata; make twins and make exercises write it)"
    )
    if "language_info" in meta:  # exercises have it too: they are copies of executed solutions
        wanted = {k: v for k, v in IPythonKernel.language_info.items() if k != "version"}
        got = {k: v for k, v in meta["language_info"].items() if k != "version"}
        assert got == wanted, f"language_info {meta['language_info']} is not what ipykernel reports"


def test_one_python_version_across_the_notebooks():
    """The version JupyterLab writes is the kernel's own Python; the notebooks agree on one (the etc/jupyter server
    config keeps a file's version when a learner's Python differs, so reading stays clean there too)."""
    versions = {}
    for path in NOTEBOOKS:
        info = _metadata(path).get("language_info")
        if info:
            versions.setdefault(info.get("version"), []).append(str(path.relative_to(ROOT)))
    some = {version: paths[:3] for version, paths in versions.items()}
    assert len(versions) == 1, f"notebooks executed under different Pythons: {some}"


def _contents_manager(root):
    """A Jupyter server's file manager configured as make setup configures JupyterLab's (etc/jupyter)."""
    from jupyter_server.services.contents.filemanager import FileContentsManager
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("jupyter_server_config.py", path=str(ROOT / "etc" / "jupyter")).load_config()
    return FileContentsManager(root_dir=str(root), config=config)


@pytest.mark.parametrize(
    "name",
    ["notebooks/14_flash_attention_triton.ipynb", "notebooks/zh-CN/15_ring_attention.ipynb"],
)
def test_a_notebook_only_read_under_another_python_is_saved_back_unchanged(tmp_path, name):
    """What JupyterLab's autosave sends for a notebook opened with a kernel of another Python version: the same
    cells, the kernel's own names. The file keeps its bytes (a twin's keys are not in nbformat's order, too)."""
    committed = (ROOT / name).read_bytes()
    (tmp_path / "nb.ipynb").write_bytes(committed)
    manager = _contents_manager(tmp_path)
    model = manager.get("nb.ipynb")
    model["content"]["metadata"]["language_info"]["version"] = "3.99.0"
    model["content"]["metadata"]["kernelspec"]["display_name"] = "Python 3"
    manager.save(model, "nb.ipynb")
    assert (tmp_path / "nb.ipynb").read_bytes() == committed


def test_a_notebook_the_learner_changed_is_saved_with_the_change(tmp_path):
    (tmp_path / "nb.ipynb").write_bytes((ROOT / "notebooks" / "01_self_attention.ipynb").read_bytes())
    manager = _contents_manager(tmp_path)
    model = manager.get("nb.ipynb")
    version = model["content"]["metadata"]["language_info"]["version"]
    model["content"]["metadata"]["language_info"]["version"] = "3.99.0"
    model["content"]["cells"][0]["source"] = "# my notes"
    manager.save(model, "nb.ipynb")
    saved = json.loads((tmp_path / "nb.ipynb").read_text(encoding="utf-8"))
    assert "".join(saved["cells"][0]["source"]) == "# my notes"
    assert saved["metadata"]["language_info"]["version"] == version  # the same kernel, the file's name for it
