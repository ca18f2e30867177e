"""The course's language, English or Chinese (中文): it picks the grader's messages and the figures' labels.

The Chinese notebooks run the same code as the English ones, so the language is not written in the code. In order:
``set_language("zh")``, else the environment variable ``ATTN_LANG`` (``en`` or ``zh``), else Chinese when the
working directory is inside a ``zh-CN`` folder (Jupyter starts a notebook's kernel in the notebook's folder), else
English.
"""

from __future__ import annotations

import os
from pathlib import Path

LANG_ENV_VAR = "ATTN_LANG"
LANGUAGES = ("en", "zh")
ZH_FOLDER = "zh-CN"
_ALIASES = {
    "en": "en",
    "english": "en",
    "zh": "zh",
    "zh-cn": "zh",
    "zh_cn": "zh",
    "cn": "zh",
    "chinese": "zh",
    "中文": "zh",
}
_chosen: str | None = None


def normalize_language(lang: str) -> str:
    """'en' or 'zh' for the usual spellings ('zh-CN', 'zh_CN', 'cn', ...); a ValueError naming the choices else."""
    key = str(lang).strip().lower()
    if key not in _ALIASES:
        raise ValueError(f"unknown language {lang!r}: use 'en' (English) or 'zh' (中文)")
    return _ALIASES[key]


def set_language(lang: str | None) -> None:
    """Use ``lang`` from now on in this process; ``None`` goes back to the environment and the folder."""
    global _chosen
    _chosen = None if lang is None else normalize_language(lang)


def current_language() -> str:
    if _chosen is not None:
        return _chosen
    env = os.environ.get(LANG_ENV_VAR, "").strip()
    if env:
        return normalize_language(env)
    try:
        return "zh" if ZH_FOLDER in Path.cwd().parts else "en"
    except OSError:  # the working directory was removed
        return "en"


def pick(en: str, zh: str, lang: str | None = None) -> str:
    """The text for ``lang`` (default: the current language) of two that say the same."""
    return zh if (normalize_language(lang) if lang else current_language()) == "zh" else en
