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

_WIDTH = ("d_model", "embed_dim", "hidden_size", "dim", "n_embd", "d", "hidden_dim", "model_dim", "emb_dim",
          "num_hiddens", "d_hidden", "embedding_dim", "n_embed", "width")
_HEADS = ("num_heads", "n_heads", "n_head", "nhead", "heads", "h", "num_attention_heads", "n_heads_q")
_HEAD_WIDTH = ("head_dim", "dim_head", "d_head", "d_k", "head_size", "attention_head_size")
_DROPOUT = ("dropout", "attn_dropout", "dropout_p", "p", "attn_pdrop", "dropout_rate", "drop")
_LENGTH = ("context_length", "block_size", "max_len", "max_seq_len", "n_ctx", "max_position_embeddings",
           "seq_len", "max_length", "ctx_len", "context_len", "max_seq_length", "n_positions")
_BIAS = ("qkv_bias", "bias", "use_bias", "add_bias", "attention_bias", "proj_bias", "qkv_proj_bias")
_BATCH_FIRST = ("batch_first",)
_CONFIG = ("config", "cfg", "args", "params", "conf", "hparams", "model_args")
_ROLES = {
    "q": ("w_query", "q_proj", "w_q", "wq", "query", "q", "q_linear", "linear_q", "to_q", "query_proj"),
    "k": ("w_key", "k_proj", "w_k", "wk", "key", "k", "k_linear", "linear_k", "to_k", "key_proj"),
    "v": ("w_value", "v_proj", "w_v", "wv", "value", "v", "v_linear", "linear_v", "to_v", "value_proj"),
    "o": ("out_proj", "o_proj", "w_o", "wo", "out", "o", "proj", "c_proj", "dense", "out_linear", "linear_out",
          "fc_out", "to_out", "output", "w_out", "output_proj", "w_output"),
    "qkv": ("qkv", "c_attn", "in_proj", "qkv_proj", "w_qkv", "wqkv", "to_qkv", "qkv_linear"),
}  # compared in lower case: W_Q, Wq and w_q are one name
_BOOK = {"q": "W_query", "k": "W_key", "v": "W_value", "o": "out_proj"}
MASKS = ("built in", "True = keep (mask == 0 hidden)", "True = hidden", "additive (0 / -inf)")
NOT_CAUSAL = " (no convention made it causal)"  # after the mask convention when none made the module causal
BOOK, ANNOTATED = "book", "annotated transformer"  # dialect names; the others are "(width, heads)"
BY_NAME = "by name"  # a class whose constructor names d_in and d_out: graded on the book's cases, d_in != d_out


class DialectError(Said):
    pass


def _params(fn):
    try:
        return [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
    except (TypeError, ValueError):
        return []


def takes_in_and_out(cls) -> bool:
    """The constructor names d_in and d_out (the book's arguments, in any order): such a class is graded on the
    book's cases, where the input and output widths differ."""
    return {"d_in", "d_out"} <= {p.name for p in _params(cls.__init__)}


class Config:
    """A config object (nanoGPT's GPTConfig, Hugging Face's PretrainedConfig): every common name of the width,
    the heads, the dropout, the context length and the bias flags answers the case's value."""

    def __init__(self, ctor: dict):
        values = {**dict.fromkeys(_WIDTH, ctor["d_out"]), **dict.fromkeys(_HEADS, ctor["num_heads"]),
                  **dict.fromkeys(_DROPOUT, ctor["dropout"]), **dict.fromkeys(_LENGTH, ctor["context_length"]),
                  **dict.fromkeys(_BIAS, True), **dict.fromkeys(_HEAD_WIDTH, ctor["d_out"] // ctor["num_heads"])}
        values.update(attention_dropout=ctor["dropout"], attention_probs_dropout_prob=ctor["dropout"],
                      resid_pdrop=0.0, resid_dropout=0.0, n_layer=1, num_key_value_heads=ctor["num_heads"],
                      is_causal=True, batch_first=True, d_in=ctor["d_out"], d_out=ctor["d_out"])
        self.__dict__.update(values)

    def __getitem__(self, name):  # cfg["n_embd"] as well as cfg.n_embd
        return self.__dict__[name]

    def get(self, name, default=None):
        return self.__dict__.get(name, default)


def _fill(p, ctor: dict, square: bool):
    """The value for constructor parameter ``p``, or ``inspect.Parameter.empty`` when no rule names it."""
    name = p.name
    if name == "d_in":
        return ctor["d_out"] if square else ctor["d_in"]
    if name == "d_out" or name in _WIDTH:
        return ctor["d_out"]
    if name in _HEADS:
        return ctor["num_heads"]
    if name in _HEAD_WIDTH:
        return ctor["d_out"] // ctor["num_heads"]
    if name in _DROPOUT or "drop" in name:
        return ctor["dropout"]
    if name in _LENGTH:
        return ctor["context_length"]
    if name in _BIAS:  # square cases have biases (zeroed where the module has none); the book's follow qkv_bias
        return True if square else bool(ctor.get("qkv_bias"))
    if name in _BATCH_FIRST:
        return True
    if name in _CONFIG:
        return Config(ctor)
    return inspect.Parameter.empty


def build(cls, ctor: dict, square: bool = True):
    """(module, dialect name): construct ``cls`` from the grader's constructor values by parameter name.
    ``square``: the case's d_in equals d_out (a class that does not take both is only given square cases)."""
    params = _params(cls.__init__)
    names = [p.name for p in params]
    if {"d_in", "d_out", "num_heads"} <= set(names) and names[:5] == ["d_in", "d_out", "context_length", "dropout",
                                                                      "num_heads"]:
        return cls(*[ctor[a] for a in ("d_in", "d_out", "context_length", "dropout", "num_heads", "qkv_bias")]), BOOK
    width = next((n for n in names if n in _WIDTH or n in ("d_in", "d_out")), None)
    heads = next((n for n in names if n in _HEADS or n in _HEAD_WIDTH), None)
    config = next((n for n in names if n in _CONFIG), None)
    if config is None and (width is None or heads is None):
        raise DialectError("dialect_constructor", names=", ".join(names) or said("no_parameters"),
                           adapter=adapter_hint(cls.__name__, names), accepted=said("accepted"))
    kwargs = {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        value = _fill(p, ctor, square)
        if value is not inspect.Parameter.empty:
            kwargs[p.name] = value
        elif p.default is inspect.Parameter.empty:
            raise DialectError("dialect_argument", name=repr(p.name), adapter=adapter_hint(cls.__name__, names),
                               accepted=said("accepted"))
    name = (ANNOTATED if names[:2] == ["h", "d_model"] else f"({config})" if width is None or heads is None
            else f"({width}, {heads})")
    positional = [p for p in params if p.kind == p.POSITIONAL_ONLY]
    args = [kwargs.pop(p.name) for p in positional if p.name in kwargs]
    module = cls(*args, **kwargs)
    _no_residual_dropout(module)
    _materialize(module, ctor["d_out"] if square else ctor["d_in"])
    return module, name


def _materialize(module, d_in: int) -> None:
    """Give lazy layers (d2l's nn.LazyLinear) their shapes with one forward on zeros, so the grader's parameters
    can be loaded into them."""
    from torch.nn.parameter import UninitializedParameter
    if not any(isinstance(p, UninitializedParameter) for p in module.parameters()):
        return
    style, _ = forward_style(module)
    x = torch.zeros(1, 2, d_in)
    with torch.no_grad():
        module(x) if style == "x" else module(x, x, x)


_RESIDUAL_DROPOUT = ("resid", "proj_drop", "out_drop", "output_drop", "hidden_drop")


def _no_residual_dropout(module) -> None:
    """Switch off a dropout on the block's output (nanoGPT's resid_dropout): the exercise's dropout is the one on
    the attention weights, and a config object gives both the same p."""
    for name, sub in module.named_modules():
        if isinstance(sub, torch.nn.Dropout) and any(part in name.lower() for part in _RESIDUAL_DROPOUT):
            sub.p = 0.0


def adapter_hint(name: str, names: list) -> str:
    """The smallest change that lets the grader build ``name``: a two-line subclass with a constructor it can
    fill in (the candidate replaces the dots with their own arguments)."""
    own = ", ".join(f"{n}=..." for n in names if n not in ("args", "kwargs")) or ""
    return (f"class Graded({name}):  def __init__(self, d_model, num_heads, dropout=0.0): "
            f"super().__init__({own})")


def _role_of(prefix: str):
    last = prefix.rsplit(".", 1)[-1].lower()
    if prefix.startswith("linears.") and last in "0123":
        return "qkvo"[int(last)]
    for role, names in _ROLES.items():
        if last in names:
            return role
    return None


def parameter_map(module, d_model: int, d_in: int | None = None) -> dict:
    """role -> {'weight': name, 'bias': name or None, 'layout': 'linear' | 'matrix' | 'rows' | 'columns'}."""
    d_in = d_model if d_in is None else d_in
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
                               "rows" if tuple(p.shape) == (3 * d_model, d_in) else "columns")
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
                b = (None if any(book[r][1] is None for r in "qkv") else torch.cat([book[r][1] for r in "qkv"]))
            else:
                w, b = book[role]
            if entry["layout"] in ("matrix", "columns"):
                w = w.T
            target = own[entry["weight"]]
            if tuple(target.shape) != tuple(w.shape):
                raise DialectError("dialect_shape", name=entry["weight"], got=str(tuple(target.shape)),
                                   need=str(tuple(w.shape)))
            target.copy_(w)
            if entry["bias"] is not None:  # a case without this bias: the module's is zero
                own[entry["bias"]].copy_(b) if b is not None else own[entry["bias"]].zero_()
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
            for r, part in zip("qkv", g.chunk(3, dim=0), strict=False):
                grads[_BOOK[r] + ".weight"] = part
            if bg is not None:
                for r, part in zip("qkv", bg.chunk(3), strict=False):
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


def _check_forward(module, style: str, mask_arg) -> None:
    """A forward with a required argument the grader cannot give (positions, a cache, ...) gets a DialectError
    that says what it tried and the two-line adapter, instead of a TypeError graded as wrong code."""
    params = [p for p in _params(module.forward) if p.kind in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY,
                                                                 p.KEYWORD_ONLY)]
    given = 1 if style == "x" else 3
    extra = [p.name for p in params[given:] if p.default is inspect.Parameter.empty and p.name != mask_arg]
    if extra:
        names = [p.name for p in params]
        call = ", ".join(["x"] * given + [f"{n}=..." for n in extra])
        raise DialectError("dialect_forward", names=", ".join(names), extra=", ".join(extra),
                           adapter=f"class Graded({type(module).__name__}):  def forward(self, x, mask=None): "
                                   f"return super().forward({call})", accepted=said("accepted"))


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
        _check_forward(module, self.style, self.mask_arg)

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
