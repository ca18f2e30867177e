"""Learner-style code for the capstone's function exercise ``induction_head``: the reference (lines tagged
``#TAG`` for ``tests.grader_cases.implementations.mutate``), alternative correct implementations, a stub, and
the known mistakes, each with the diagnosis the grader must give."""

REFERENCE = '''
import torch
from course_utils.induction import make_batch


def find_induction_head(model):
    cfg = model.config
    batch = make_batch(128, cfg.context_length, cfg.vocab_size, generator=torch.Generator().manual_seed(0))
    _, weights = model(batch.tokens, return_weights=True)  #CALL
    att = torch.stack(weights, dim=1)  # (B, n_layers, n_heads, T, T)
    scores = torch.zeros(cfg.n_layers, cfg.n_heads)
    for i in range(batch.tokens.shape[0]):
        distance = int(batch.second[i] - batch.first[i])
        q = torch.arange(int(batch.second[i]), cfg.context_length)
        scores += att[i][:, :, q, q - distance + 1].mean(-1)  #KEY
    scores = scores  #LAYERS
    layer, head = divmod(int(scores.argmax()), cfg.n_heads)  #UNRAVEL
    return layer, head  #RETURN
'''

ALTERNATIVES = {
    # its own data: one random sequence repeated, and the stripe `half - 1` below the diagonal
    "own_repeated_sequence": '''
import torch


def find_induction_head(model):
    cfg = model.config
    half = cfg.context_length // 2
    g = torch.Generator().manual_seed(1)
    first = torch.stack([torch.randperm(cfg.vocab_size, generator=g)[:half] for _ in range(64)])
    tokens = torch.cat([first, first], dim=1)  # (64, 2 * half)
    _, weights = model(tokens, return_weights=True)
    best, answer = -1.0, None
    for layer, w in enumerate(weights):  # w: (B, n_heads, T, T)
        stripe = torch.diagonal(w, offset=-(half - 1), dim1=-2, dim2=-1)[..., 1:]  # queries half.. -> keys 1..
        for head, score in enumerate(stripe.mean(dim=(0, 2)).tolist()):
            if score > best:
                best, answer = score, (layer, head)
    return answer
''',
    # no return_weights: capture each layer's normalised input with a hook and recompute the attention by hand
    "hooks_and_own_softmax": '''
import math
import torch
from course_utils.induction import make_batch


def find_induction_head(model):
    cfg = model.config
    inputs = {}
    hooks = [block.ln_1.register_forward_hook(lambda m, a, out, i=i: inputs.__setitem__(i, out))
             for i, block in enumerate(model.blocks)]
    try:
        batch = make_batch(64, cfg.context_length, cfg.vocab_size, generator=torch.Generator().manual_seed(2))
        model(batch.tokens)
    finally:
        for h in hooks:
            h.remove()
    b, t = batch.tokens.shape
    hd = cfg.emb_dim // cfg.n_heads
    best = None
    for layer, block in enumerate(model.blocks):
        x = inputs[layer]
        q = block.attn.W_query(x).view(b, t, cfg.n_heads, hd).transpose(1, 2)
        k = block.attn.W_key(x).view(b, t, cfg.n_kv_groups, hd).transpose(1, 2)
        k = k.repeat_interleave(cfg.n_heads // cfg.n_kv_groups, dim=1)
        scores = (q @ k.transpose(-2, -1) / math.sqrt(hd)).masked_fill(
            torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        att = scores.softmax(dim=-1)
        for head in range(cfg.n_heads):
            total = 0.0
            for i in range(b):
                s, f = int(batch.second[i]), int(batch.first[i])
                total += sum(float(att[i, head, s + j, f + j + 1]) for j in range(t - s)) / (t - s)
            if best is None or total > best[0]:
                best = (total, layer, head)
    return best[1], best[2]
''',
    # by causal effect: the heads whose ablation breaks the task are the two heads of the circuit, and the
    # induction head reads what the previous-token head wrote, so it is the later one
    "ablation_then_latest_layer": '''
import torch
from course_utils.gpt import ablate_heads
from course_utils.induction import accuracy, make_batch


def find_induction_head(model):
    cfg = model.config
    batch = make_batch(128, cfg.context_length, cfg.vocab_size, generator=torch.Generator().manual_seed(3))
    base = accuracy(model, batch)
    harmful = []
    for layer in range(cfg.n_layers):
        for head in range(cfg.n_heads):
            with ablate_heads(model, [(layer, head)]):
                if base - accuracy(model, batch) > 0.5:
                    harmful.append((layer, head))
    return max(harmful)
''',
}

STUB = '''
def find_induction_head(model):
    # YOUR CODE HERE
    raise NotImplementedError("your code here")
'''

# (diagnosis, line edits of REFERENCE or a whole source)
MUTANTS = [
    ("previous_token_head", {"KEY": "scores += att[i][:, :, 1:, :-1].diagonal(dim1=-2, dim2=-1).mean(-1)"}),
    ("layer_one_based", {"RETURN": "return layer + 1, head"}),
    ("one_based", {"RETURN": "return layer + 1, head + 1"}),
    ("flat_index_unravelled", {"UNRAVEL": "layer, head = divmod(int(scores.argmax()), cfg.n_layers)"}),
    ("last_layer_assumed", {"LAYERS": "scores[:-1] = -1.0",
                            "UNRAVEL": "layer, head = cfg.n_layers - 1, int(scores[-1].argmax())"}),
    ("contract", {"RETURN": "return scores"}),
    ("exception", {"CALL": "_, weights = model(batch.tokens)  # forgot return_weights=True"}),
]

DELEGATES = '''
import torch
from course_utils.induction import head_scores, make_batch


def find_induction_head(model):
    cfg = model.config
    scores = head_scores(model, make_batch(64, cfg.context_length, cfg.vocab_size))["induction"]
    return divmod(int(scores.argmax()), cfg.n_heads)
'''


# --- the fixture, in the contract test's one shape (tests/grade/exercises/fixtures.py) -------------------------

FIXTURES = {"induction_head": {"reference": REFERENCE, "alternatives": ALTERNATIVES, "stubs": {"stub": STUB},
                               "mutants": MUTANTS}}
