"""What the sandboxed child sent as texts: its said forms (``sandbox/texts.py``: keys and arguments) turned into
``Msg`` of the catalogue, the child's data untrusted (only its own keys, plain strings and bounded sizes)."""

from __future__ import annotations

from .messages import JOINS, Msg
from .sandbox import texts as child

_MAX_NODES, _MAX_DEPTH, _MAX_TEXT = 200, 6, 4000


def from_child(tree, english):
    """The Msg for a said form (``sandbox/texts.py``) that the child sent along with its English text, when the
    form is well made and says exactly ``english``; else ``english`` itself. The child is not trusted: only its
    own keys, plain strings and bounded sizes are accepted."""
    if tree is None or english is None:
        return english
    try:
        msg = _from_tree(tree, 0, [0])
    except (TypeError, ValueError, KeyError, IndexError, AttributeError):
        return english
    return msg if isinstance(msg, Msg) and str.__str__(msg) == english else english


def _from_tree(tree, depth, count):
    count[0] += 1
    if count[0] > _MAX_NODES or depth > _MAX_DEPTH:
        raise ValueError("too large")
    if isinstance(tree, str):
        return tree[:_MAX_TEXT]
    if not isinstance(tree, dict) or set(tree) != {"key", "args"}:
        raise ValueError("not a said form")
    key, args = tree["key"], tree["args"]
    if not isinstance(key, str) or not (key in child.TEXTS or key in JOINS) or not isinstance(args, dict):
        raise ValueError("unknown key")
    clean = {}
    for name, value in list(args.items())[:12]:
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError("bad argument name")
        if isinstance(value, list) and key in JOINS and name == "items":
            clean[name] = [_from_tree(v, depth + 1, count) for v in value[:64]]
        else:
            clean[name] = _from_tree(value, depth + 1, count)
    return Msg(key, **clean)
