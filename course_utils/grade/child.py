"""What the sandboxed child sent as texts: its said forms (``sandbox/texts.py``: a sandbox module, a key of its
``TEXTS``, arguments) turned into ``Msg`` of that module's texts, the child's data untrusted (only texts of the
sandbox's own modules, plain strings and bounded sizes)."""

from __future__ import annotations

import pkgutil
from functools import cache
from typing import Any

from . import sandbox
from .messages import Msg, said_in
from .sandbox.texts import JOINS

_MAX_NODES, _MAX_DEPTH, _MAX_TEXT = 200, 6, 4000


@cache
def _homes() -> frozenset[str]:
    """The sandbox's modules, named within its package ("texts", "ranks", "kinds.ring"): the only homes a said form
    may name."""
    prefix = sandbox.__name__ + "."
    found = pkgutil.walk_packages(sandbox.__path__, prefix)
    return frozenset(info.name[len(prefix) :] for info in found if not info.ispkg)


def from_child(tree: Any, english: Any) -> Any:
    """The Msg for a said form (``sandbox/texts.py``) that the child sent along with its English text, when the
    form is well made and says exactly ``english``; else ``english`` itself. The child is not trusted: only its
    own texts, plain strings and bounded sizes are accepted."""
    if tree is None or english is None:
        return english
    try:
        msg = _from_tree(tree, 0, [0])
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, ImportError):
        return english
    return msg if isinstance(msg, Msg) and str.__str__(msg) == english else english


def _from_tree(tree, depth, count):
    count[0] += 1
    if count[0] > _MAX_NODES or depth > _MAX_DEPTH:
        raise ValueError("too large")
    if isinstance(tree, str):
        return tree[:_MAX_TEXT]
    if not isinstance(tree, dict) or set(tree) != {"home", "key", "args"}:
        raise ValueError("not a said form")
    home, key, args = tree["home"], tree["key"], tree["args"]
    if not isinstance(home, str) or home not in _homes() or not isinstance(key, str) or not isinstance(args, dict):
        raise ValueError("unknown text")
    clean = {}
    for name, value in list(args.items())[:12]:
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError("bad argument name")
        if isinstance(value, list) and key in JOINS and name == "items":
            clean[name] = [_from_tree(v, depth + 1, count) for v in value[:64]]
        else:
            clean[name] = _from_tree(value, depth + 1, count)
    if key in JOINS:
        return Msg(key, **clean)  # the joins are the shared texts' (messages.py)
    return said_in(f"{sandbox.__name__}.{home}", key, **clean)
