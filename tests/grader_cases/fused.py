"""Interview mode and fused attention: routes to PyTorch's fused attention that hide it from a reader of the
source or from a watcher of one eval-mode call (each must be refused, by what runs), and honest answers that only
*name* the fused kernel (each must pass: a name in the text is not evidence).

Every submission keeps the book's constructor and parameters (tests.grader_cases.attacks' head) and changes only
how the attention inside ``forward`` is computed.
"""
from tests.grader_cases.attacks import _MHA_HEAD, GOOD, SDPA_FORWARD

SDPA = "F.scaled_dot_product_attention(q, k, v, is_causal=True)"


def _with_forward(call: str, before: str = "", after: str = "") -> str:
    """The book's class whose attention is ``call`` (q, k, v: (B, nh, T, hs) -> (B, nh, T, hs))."""
    return before + _MHA_HEAD + SDPA_FORWARD.format(call=call) + after


# ---------------------------------------------------------------------------------------------- refused
CHEATS = {
    # by hand in eval mode (the only call an earlier grader traced), SDPA whenever the module trains
    "train_only.py": GOOD.replace(
        "        scores = q @ k.transpose(2, 3) / math.sqrt(self.head_dim)  #SCALE\n",
        "        if self.training:\n"
        "            p = self.dropout.p\n"
        "            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)\n"
        "            return self.out_proj(y.transpose(1, 2).reshape(b, n, self.d_out))\n"
        "        scores = q @ k.transpose(2, 3) / math.sqrt(self.head_dim)  #SCALE\n"),
    # TorchScript: the call runs in the TorchScript interpreter, from source text the tracer never parses
    "script_cu.py": _with_forward("ATTEND.attend(q, k, v)", before=(
        "import torch\n"
        "ATTEND = torch.jit.CompilationUnit('''\n"
        "def attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:\n"
        "    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)\n"
        "''')\n")),
    "script_fn.py": _with_forward("attend(q, k, v)", before=(
        "import torch\n"
        "import torch.nn.functional as F\n\n\n"
        "@torch.jit.script\n"
        "def attend(q, k, v):\n"
        "    return F.scaled_dot_product_attention(q, k, v, is_causal=True)\n\n\n")),
    # a torch.library custom op of one's own whose body is SDPA
    "custom_op.py": _with_forward("torch.ops.interview.attend(q, k, v)", before=(
        "import torch\n"
        "import torch.nn.functional as F\n"
        "LIB = torch.library.Library('interview', 'DEF')\n"
        "LIB.define('attend(Tensor q, Tensor k, Tensor v) -> Tensor')\n"
        "LIB.impl('attend', lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),\n"
        "         'CompositeImplicitAutograd')\n")),
    "custom_op_decorated.py": _with_forward("attend(q, k, v)", before=(
        "import torch\n"
        "import torch.nn.functional as F\n\n\n"
        "@torch.library.custom_op('interview2::attend', mutates_args=())\n"
        "def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:\n"
        "    return F.scaled_dot_product_attention(q, k, v, is_causal=True)\n\n\n")),
    # vmap over the heads: each head's (T, hs) goes through SDPA
    "vmap_heads.py": _with_forward(
        "torch.vmap(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True), in_dims=1, "
        "out_dims=1)(q, k, v)"),
    # torch.compile (the eager backend: no C++ compiler needed) of the fused call
    "compiled.py": _with_forward("ATTEND(q, k, v)", before=(
        "import torch\n"
        "import torch.nn.functional as F\n"
        "ATTEND = torch.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),\n"
        "                       backend='eager')\n")),
    # FlexAttention: a causal score_mod, PyTorch's other fused attention
    "flex.py": _with_forward("flex_attention(q, k, v, score_mod=causal)", before=(
        "import torch\n"
        "from torch.nn.attention.flex_attention import flex_attention\n\n\n"
        "def causal(score, b, h, q_idx, kv_idx):\n"
        "    return torch.where(q_idx >= kv_idx, score, -float('inf'))\n\n\n")),
    # the private aten kernel reached through a name built at run time
    "built_name.py": _with_forward("getattr(torch.ops.aten, NAME)(q, k, v, is_causal=True)[0]",
                                   before="import torch\nNAME = '_scaled_dot_product_' + 'attention_math'\n"),
    # nn.MultiheadAttention's functional form on the class's own weights; with need_weights=True it computes the
    # weights with bmm and softmax, no fused kernel: seen at torch's function level
    "mha_functional.py": _MHA_HEAD + '''
    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = (lin(x).transpose(0, 1) for lin in (self.W_query, self.W_key, self.W_value))  # (T, B, d_out)
        eye = torch.eye(self.d_out)  # projections done above: identity in-projections
        y, _ = F.multi_head_attention_forward(
            q, k, v, self.d_out, self.num_heads, None, None, None, None, False, self.dropout.p,
            self.out_proj.weight, self.out_proj.bias, training=self.training, need_weights=True,
            attn_mask=self.mask.bool()[:n, :n], use_separate_proj_weight=True,
            q_proj_weight=eye, k_proj_weight=eye, v_proj_weight=eye)
        return y.transpose(0, 1)
''',
    # SDPA only on plain tensors (a traced input gets the computation by hand), or with torch functions' hooks off:
    # both dodge a watcher of the input, not the dispatcher
    "type_sniffing.py": _with_forward("(" + SDPA + " if type(q) is torch.Tensor else self.by_hand(q, k, v))",
                                      before="import torch\n") + '''
    def by_hand(self, q, k, v):
        n = q.shape[-2]
        scores = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(self.mask.bool()[:n, :n], -torch.inf)
        return self.dropout(torch.softmax(scores, dim=-1)) @ v
''',
    "subclass_hooks_off.py": _with_forward("self.quietly(q, k, v)", before="import torch\n") + '''
    def quietly(self, q, k, v):
        with torch._C.DisableTorchFunctionSubclass():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
''',
    # stopping the grader's record of what runs, then calling SDPA
    "stops_profiler.py": _with_forward("(torch.autograd._disable_profiler(), " + SDPA + ")[1]",
                                       before="import torch\n"),
}

# ---------------------------------------------------------------------------------------------- honest
_BY_HAND = '''
    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = (self.split(lin(x), b, n) for lin in (self.W_query, self.W_key, self.W_value))
        hide = self.mask.bool()[:n, :n]
        y = scaled_dot_product_attention(q, k, v, hide, self.dropout)
        return self.out_proj(y.transpose(1, 2).reshape(b, n, self.d_out))
'''

_HELPER = '''

def scaled_dot_product_attention(q, k, v, hide, dropout):
    """softmax(q k^T / sqrt(d)) v, by hand: what F.scaled_dot_product_attention (the fused kernel) computes."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, nh, T, T)
    return dropout(torch.softmax(scores.masked_fill(hide, -torch.inf), dim=-1)) @ v

'''


def _head_with_helper(head: str) -> str:
    """``head`` (imports, class header, __init__, split) with the helper defined before the class."""
    at = head.index("class MultiHeadAttention")
    return head[:at] + _HELPER.lstrip("\n") + "\n" + head[at:]


HONEST = {
    # a helper of one's own named like the fused kernel
    "own_helper_named_sdpa.py": _head_with_helper(_MHA_HEAD) + _BY_HAND,
    # a docstring and comments that name the fused kernels and their aten names
    "docstring_mentions.py": GOOD.replace(
        "class MultiHeadAttention(nn.Module):\n",
        'class MultiHeadAttention(nn.Module):\n'
        '    """Causal MHA by hand; in production one would call F.scaled_dot_product_attention (flash attention,\n'
        '    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu), FlexAttention or nn.MultiheadAttention."""\n'
        '    FUSED = "scaled_dot_product_attention"  # the name only, never called\n'),
    # a test at the end of the file that compares the answer with SDPA (runs when the cell runs, not in forward)
    "test_compares_with_sdpa.py": GOOD + '''

torch.manual_seed(0)
_m = MultiHeadAttention(8, 8, 6, 0.0, 2, qkv_bias=True).eval()
_x = torch.randn(2, 6, 8)
with torch.no_grad():
    _q, _k, _v = (_m.split(lin(_x), 2, 6) for lin in (_m.W_query, _m.W_key, _m.W_value))
    _ref = F.scaled_dot_product_attention(_q, _k, _v, is_causal=True)
    _ref = _m.out_proj(_ref.transpose(1, 2).reshape(2, 6, 8))
    assert torch.allclose(_m(_x), _ref, atol=1e-5), "my MHA differs from SDPA"
''',
    # the fused kernel imported (for a comparison never run) but not called
    "unused_import.py": "from torch.nn.functional import scaled_dot_product_attention  # noqa: F401\n" + GOOD,
    # a torch.library operator of one's own, named like the fused kernel, whose body is the computation by hand
    "own_custom_op_named_sdpa.py": _head_with_helper(_MHA_HEAD).replace(
        "class MultiHeadAttention", "LIB = torch.library.Library('mine', 'DEF')\n"
        "LIB.define('scaled_dot_product_attention(Tensor q, Tensor k, Tensor v, Tensor hide) -> Tensor')\n"
        "LIB.impl('scaled_dot_product_attention', lambda q, k, v, hide: scaled_dot_product_attention(\n"
        "    q, k, v, hide, lambda w: w), 'CompositeImplicitAutograd')\n\n\n"
        "class MultiHeadAttention", 1) + _BY_HAND.replace(
        "scaled_dot_product_attention(q, k, v, hide, self.dropout)",
        "self.dropout_on(torch.ops.mine.scaled_dot_product_attention(q, k, v, hide), q, k, v, hide)") + '''
    def dropout_on(self, y, q, k, v, hide):  # the custom op has no dropout: in training, the helper with it
        return scaled_dot_product_attention(q, k, v, hide, self.dropout) if self.training else y
''',
}
