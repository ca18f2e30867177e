"""JupyterLab's server as `make setup` configures it, with jupyter_server_config.json beside this file.

Reading a notebook must not change it on disk. JupyterLab writes into an open notebook the kernel it started for
it, then autosaves: the kernelspec's display name, and ``language_info`` with the kernel's own Python version. The
course's notebooks carry the names JupyterLab writes (tests/course/test_notebook_metadata.py), but a learner whose
Python is another version than the one the notebooks were run with would still find every notebook they opened
rewritten. So, when a notebook is saved over an existing file:

* it keeps that file's Python version and kernelspec display name (the same kernel, named by another machine);
* a save that then changes nothing the notebook holds (the same JSON) leaves the file's bytes as they were.

A notebook that was only read is therefore written back unchanged: `git status` stays clean, `git pull` works.
"""

import json
import os
import warnings

_before_save: dict[str, bytes] = {}  # path of a file being saved -> its bytes before the save


def keep_the_files_kernel_names(model, path, contents_manager, **kwargs):
    """Pre-save hook: restore the file's ``language_info.version`` and ``kernelspec.display_name`` when the kernel
    is the same (same language name, same kernelspec name); remember the file's bytes for the post-save hook."""
    if model.get("type") != "notebook" or not isinstance(model.get("content"), dict):
        return
    try:
        os_path = contents_manager._get_os_path(path)
        with open(os_path, "rb") as file:
            before = file.read()
        on_disk = json.loads(before).get("metadata", {})
    except (OSError, ValueError, AttributeError):  # a new file, not a notebook, another contents manager
        return
    _before_save[os_path] = before
    saving = model["content"].setdefault("metadata", {})
    for key, field in (("language_info", "version"), ("kernelspec", "display_name")):
        old, new = on_disk.get(key), saving.get(key)
        if isinstance(old, dict) and isinstance(new, dict) and field in old and old.get("name") == new.get("name"):
            new[field] = old[field]


def keep_the_files_bytes(model, os_path, contents_manager, **kwargs):
    """Post-save hook: a save whose JSON equals the file's before (only the formatting differs, e.g. the order of
    keys) puts the old bytes back, with the modification time of the save (JupyterLab compares it next time)."""
    before = _before_save.pop(os_path, None)
    if before is None:
        return
    try:
        with open(os_path, "rb") as file:
            after = file.read()
        if after == before or json.loads(after) != json.loads(before):
            return
        saved = os.stat(os_path)
        with open(os_path, "wb") as file:
            file.write(before)
        os.utime(os_path, ns=(saved.st_atime_ns, saved.st_mtime_ns))
    except (OSError, ValueError):
        return


# jupyter_server validates a configured hook once per time the config is applied, and the second time warns that the
# hook "overrides" itself: a line on the terminal about nothing
warnings.filterwarnings(
    "ignore", message=r"Overriding existing (pre|post)_save_hook \(keep_the_files_", category=UserWarning
)
c.ContentsManager.pre_save_hook = keep_the_files_kernel_names  # type: ignore[name-defined]  # noqa: F821
c.ContentsManager.post_save_hook = keep_the_files_bytes  # type: ignore[name-defined]  # noqa: F821
