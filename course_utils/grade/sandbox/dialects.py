"""Interview mode in the candidate's own dialect: how to build, load and call an MHA class written in any of
the common styles, mapped onto the grader's (the book's) parameters W_query, W_key, W_value, out_proj.

Answer-free: it reads constructor and forward signatures and parameter names and shapes, and picks the mask
convention under which the module is causal (a later token never changes an earlier output). It runs inside
the sandbox, beside the harness; the verdict is still computed outside.
"""
from __future__ import annotations

import inspect

import torch

try:
    from .texts import Said, said
except ImportError:  # sandboxed: beside texts.py in /grader
    from texts import Said, said

_WIDTH = ("d_model", "embed_dim", "hidden_size", "dim", "n_embd", "d", "hidden_dim", "model_dim", "emb_dim")
_HEADS = ("num_heads", "n_heads", "n_head", "nhead", "heads", "h", "num_attention_heads")
_DROPOUT = ("dropout", "attn_dropout", "dropout_p", "p", "attn_pdrop", "dropout_rate", "drop")
_LENGTH = ("context_length", "block_size", "max_len", "max_seq_len", "n_ctx", "max_position_embeddings",
           "seq_len", "max_length")
_ROLES = {
    "q": ("W_query", "q_proj", "W_q", "wq", "query", "q", "q_linear", "linear_q", "to_q", "Wq"),
    "k": ("W_key", "k_proj", "W_k", "wk", "key", "k", "k_linear", "linear_k", "to_k", "Wk"),
    "v": ("W_value", "v_proj", "W_v", "wv", "value", "v", "v_linear", "linear_v", "to_v", "Wv"),
    "o": ("out_proj", "o_proj", "W_o", "wo", "out", "o", "proj", "c_proj", "dense", "out_linear", "linear_out",
          "fc_out", "to_out", "output", "Wo", "W_out"),
    "qkv": ("qkv", "c_attn", "in_proj", "qkv_proj", "W_qkv", "Wqkv", "to_qkv", "qkv_linear"),
}
_BOOK = {"q": "W_query", "k": "W_key", "v": "W_value", "o": "out_proj"}
MASKS = ("built in", "True = keep (mask == 0 hidden)", "True = hidden", "additive (0 / -inf)")
NOT_CAUSAL = " (no convention made it causal)"  # after the mask convention when none made the module causal
BOOK, ANNOTATED = "book", "annotated transformer"  # dialect names; the others are "(width, heads)"


class DialectError(Said):
    pass


def _params(fn):
    try:
        return [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
    except (TypeError, ValueError):
        return []


def build(cls, ctor: dict):
    """(module, dialect name): construct ``cls`` from the grader's constructor values by parameter name."""
    params = _params(cls.__init__)
    names = [p.name for p in params]
    if {"d_in", "d_out", "num_heads"} <= set(names):
        return cls(*[ctor[a] for a in ("d_in", "d_out", "context_length", "dropout", "num_heads", "qkv_bias")]), BOOK
    width = next((n for n in names if n in _WIDTH), None)
    heads = next((n for n in names if n in _HEADS), None)
    if width is None or heads is None:
        raise DialectError("dialect_constructor", names=", ".join(names) or said("no_parameters"),
                           accepted=said("accepted"))
    kwargs = {width: ctor["d_out"], heads: ctor["num_heads"]}
    for p in params:
        if p.name in _DROPOUT or "drop" in p.name:
            kwargs[p.name] = ctor["dropout"]
        elif p.name in _LENGTH:
            kwargs[p.name] = ctor["context_length"]
        elif p.name not in kwargs and p.default is inspect.Parameter.empty and p.kind in (
                p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            raise DialectError("dialect_argument", name=repr(p.name), accepted=said("accepted"))
    name = ANNOTATED if names[:2] == ["h", "d_model"] else f"({width}, {heads})"
    return cls(**kwargs), name


def _role_of(prefix: str):
    last = prefix.rsplit(".", 1)[-1]
    if prefix.startswith("linears.") and last in "0123":
        return "qkvo"[int(last)]
    for role, names in _ROLES.items():
        if last in names:
            return role
    return None


def parameter_map(module, d_model: int) -> dict:
    """role -> {'weight': name, 'bias': name or None, 'layout': 'linear' | 'matrix' | 'rows' | 'columns'}."""
    found, unknown = {}, []
    for name, p in module.named_parameters():
        prefix, _, leaf = name.rpartition(".")
        if not prefix:  # a bare nn.Parameter matrix used as x @ W
            role = _role_of(leaf)
            if role in ("q", "k", "v", "o") and p.dim() == 2:
                found.setdefault(role, {"bias": None})["weight"] = name
                found[role]["layout"] = "matrix"
                continue
            unknown.append(name)
            continue
        role = _role_of(prefix)
        if role is None or leaf not in ("weight", "bias"):
            unknown.append(name)
            continue
        entry = found.setdefault(role, {"bias": None})
        entry[leaf] = name
        if leaf == "weight":
            entry["layout"] = ("linear" if role != "qkv" else
                               "rows" if tuple(p.shape) == (3 * d_model, d_model) else "columns")
    if "qkv" in found:
        needed = {"qkv", "o"}
    else:
        needed = {"q", "k", "v", "o"}
    missing = sorted(needed - set(found))
    if missing or unknown or set(found) - needed:
        problems = []
        if missing:
            problems.append(said("no_projection", roles=said("list.comma", items=[said("projection_" + m)
                                                                                  for m in missing])))
        if unknown:
            problems.append(said("cannot_place", names=", ".join(unknown)))
        raise DialectError("dialect_parameters", problems=said("list.semicolon", items=problems),
                           accepted=said("accepted"))
    return found


def load(module, pmap: dict, params: dict) -> list:
    """Copy the grader's book-named parameters into the candidate's; returns the roles that have no bias."""
    own = dict(module.named_parameters())
    book = {r: (params[_BOOK[r] + ".weight"], params.get(_BOOK[r] + ".bias")) for r in "qkvo"}
    with torch.no_grad():
        for role, entry in pmap.items():
            if role == "qkv":
                w = torch.cat([book[r][0] for r in "qkv"])
                b = torch.cat([book[r][1] for r in "qkv"])
            else:
                w, b = book[role]
            if entry["layout"] in ("matrix", "columns"):
                w = w.T
            target = own[entry["weight"]]
            if tuple(target.shape) != tuple(w.shape):
                raise DialectError("dialect_shape", name=entry["weight"], got=str(tuple(target.shape)),
                                   need=str(tuple(w.shape)))
            target.copy_(w)
            if entry["bias"] is not None:
                own[entry["bias"]].copy_(b)
    no_bias = set()
    for role, entry in pmap.items():
        if entry["bias"] is None:
            no_bias |= {"q", "k", "v"} if role == "qkv" else {role}
    return sorted(no_bias)


def book_grads(module, pmap: dict) -> dict:
    """The candidate's parameter gradients under the book's names (zeros where there is no gradient)."""
    own = dict(module.named_parameters())
    grads = {}
    for role, entry in pmap.items():
        p = own[entry["weight"]]
        g = p.grad if p.grad is not None else torch.zeros_like(p)
        if entry["layout"] in ("matrix", "columns"):
            g = g.T
        bias = own[entry["bias"]] if entry["bias"] else None
        bg = None if bias is None else (bias.grad if bias.grad is not None else torch.zeros_like(bias))
        if role == "qkv":
            for r, part in zip("qkv", g.chunk(3, dim=0)):
                grads[_BOOK[r] + ".weight"] = part
            if bg is not None:
                for r, part in zip("qkv", bg.chunk(3)):
                    grads[_BOOK[r] + ".bias"] = part
        else:
            grads[_BOOK[role] + ".weight"] = g
            if bg is not None:
                grads[_BOOK[role] + ".bias"] = bg
    return grads


def forward_style(module) -> tuple[str, str | None]:
    """('x' | 'qkv', the mask parameter's name or None)."""
    params = [p for p in _params(module.forward) if p.kind in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY,
                                                                p.KEYWORD_ONLY)]
    names = [p.name for p in params]
    mask = next((n for n in names if "mask" in n), None)
    required = [p.name for p in params if p.default is inspect.Parameter.empty]
    if len(required) >= 3 or names[:3] in (["query", "key", "value"], ["q", "k", "v"]):
        return "qkv", mask
    return "x", mask


def make_mask(kind: int, batch: int, tokens: int, shape: str):
    if kind == 0:
        return None
    keep = torch.ones(tokens, tokens, dtype=torch.bool).tril()
    m = keep if kind == 1 else ~keep if kind == 2 else torch.zeros(tokens, tokens).masked_fill(~keep, float("-inf"))
    if shape == "batch":
        return m.expand(batch, tokens, tokens)
    if shape == "batch_head":
        return m.expand(batch, 1, tokens, tokens)
    return m


class Caller:
    """Calls the candidate's module as its forward expects, with the mask convention that makes it causal."""

    def __init__(self, module):
        self.module = module
        self.style, self.mask_arg = forward_style(module)
        self.kind, self.shape = 0, "square"

    def __call__(self, x):
        args = (x,) if self.style == "x" else (x, x, x)
        mask = make_mask(self.kind, x.shape[0], x.shape[-2], self.shape)
        if self.kind and self.mask_arg:
            return self.module(*args, **{self.mask_arg: mask})
        return self.module(*args)

    def settle(self, x) -> str:
        """Pick the convention under which outputs before the last token depend least on the last token:
        not at all for a correct module (causal); the least for one with an unrelated mistake. When none is causal,
        a forward that takes a mask is given one (the convention that leaks least), not called without it: a
        mask filled with the wrong value must be graded as that mistake, not as a missing mask."""
        if self.mask_arg is None:
            return MASKS[0]
        g = torch.Generator().manual_seed(0)  # a probe of ordinary size: large inputs saturate the softmax
        x = torch.randn(x.shape, generator=g, dtype=x.dtype)
        x2 = x.clone()
        x2[:, -1] += torch.randn(x2[:, -1].shape, generator=g, dtype=x.dtype)
        leaks = []  # (leak, kind, shape) of each convention that ran
        self.module.eval()
        for kind in range(4):
            for shape in ("square", "batch_head", "batch"):
                self.kind, self.shape = kind, shape
                try:
                    with torch.no_grad():
                        a, b = self(x), self(x2)
                except Exception:  # noqa: BLE001 - this shape or convention does not fit the candidate's code
                    continue
                if not isinstance(a, torch.Tensor) and isinstance(a, (tuple, list)):
                    a, b = a[0], b[0]
                if not isinstance(a, torch.Tensor) or a.shape != x.shape:
                    continue  # the mask broadcast into the wrong shape
                leaks.append(((a[:, :-1] - b[:, :-1]).abs().nan_to_num(float("inf")).sum().item(), kind, shape))
                break  # it ran in this shape: the convention, not the shape, is what counts
        causal = [c for c in leaks if c[0] <= 1e-5]
        masked = [c for c in leaks if c[1] > 0]
        best = causal[0] if causal else min(masked or leaks, key=lambda c: c[0], default=None)
        leak, self.kind, self.shape = best or (0.0, 0, "square")
        return MASKS[self.kind] + ("" if leak <= 1e-5 else NOT_CAUSAL)
