"""Shared pieces of the reference tests: an independent SDPA-based attention, tolerances, seeding.

``sdpa_attention`` recomputes a ``GroupedQueryAttention`` from its parameters with PyTorch's own
``F.scaled_dot_product_attention`` and masks built here with ``torch.tril``, so a test comparing the two
does not trust any of the course's code paths.
"""

import linecache
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

# the tests' check() calls (notebooks under nbval, kernels they start) must not fill the developer's own progress
os.environ.setdefault("ATTN_HISTORY", "off")

# (atol, rtol) per dtype: float64 is exact up to summation order. In half precision the rounding error
# grows with the size of the values, so there atol is relative to the largest expected value.
TOL = {
    torch.float64: (1e-10, 1e-10),
    torch.float32: (2e-5, 1e-4),
    torch.float16: (5e-3, 5e-3),
    torch.bfloat16: (3e-2, 3e-2),
}


def pytest_configure(config):
    # the suite checks English outputs (and the Chinese twins by their folder): a learner's exported ATTN_LANG
    # must not switch the language of every kernel and grader report it starts
    os.environ.pop("ATTN_LANG", None)
    if config.getoption("nbval", default=False):
        # every figure a notebook shows is checked as it is drawn (course_utils/figure_check.py): nbval fails there
        os.environ.setdefault("ATTN_CHECK_FIGURES", "1")
    config.addinivalue_line("markers", "cuda: needs a CUDA device; skipped when torch.cuda.is_available() is False")
    config.addinivalue_line(
        "markers",
        "requires_sandbox: needs the grader's sandbox (Linux and bubblewrap); skipped "
        "with the reason where there is none, an error in CI (CI=true)",
    )


def pytest_runtest_setup(item):
    if item.get_closest_marker("requires_sandbox") is None:
        return
    from course_utils.grade import jail  # here, not at the top: most of the suite never needs it

    why = jail.probe()
    if why is None:
        return
    if os.environ.get("CI") == "true":  # CI installs bubblewrap (.ci/run): there the sandbox must really be tested
        pytest.fail(f"CI without the grader's sandbox: {why}", pytrace=False)
    pytest.skip(f"no sandbox here: {why}")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def assert_close(actual, expected, dtype=None):
    dtype = dtype or expected.dtype
    atol, rtol = TOL[dtype]
    if dtype in (torch.float16, torch.bfloat16):
        atol *= max(1.0, expected.detach().abs().max().item())
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)


def randomize_(module, scale=0.5):
    """Re-draw every parameter from N(0, scale^2): larger scores than the default init, so the softmax is
    far from uniform and a wrong scale or mask changes the output a lot."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * scale)
    return module


def causal_allow(num_queries, num_keys, device=None):
    """(Sq, Sk) bool, True = may attend; the queries are the last Sq of the Sk positions."""
    ones = torch.ones(num_queries, num_keys, dtype=torch.bool, device=device)
    return torch.tril(ones, diagonal=num_keys - num_queries)


def sdpa_attention(m, x, context=None, allow=None, causal=None):
    """``m``'s function computed with F.scaled_dot_product_attention from ``m``'s parameters.

    allow: bool mask broadcastable to (B, nh, Sq, Sk), True = may attend (combined with the causal mask).
    """
    causal = m.causal if causal is None else causal
    context = x if context is None else context
    b, sq, _ = x.shape
    nh, ng, hd = m.num_heads, m.num_kv_groups, m.head_dim
    q = F.linear(x, m.W_query.weight, m.W_query.bias).view(b, sq, nh, hd).transpose(1, 2)
    k = F.linear(context, m.W_key.weight, m.W_key.bias).view(b, context.shape[1], ng, hd).transpose(1, 2)
    v = F.linear(context, m.W_value.weight, m.W_value.bias).view(b, context.shape[1], ng, hd).transpose(1, 2)
    mask = causal_allow(sq, k.shape[2], x.device) if causal else None
    if allow is not None:
        mask = allow if mask is None else mask & allow
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=ng != nh)  # (B, nh, Sq, hd)
    out = out.transpose(1, 2).reshape(b, sq, nh * hd)
    return F.linear(out, m.out_proj.weight, m.out_proj.bias)


@pytest.fixture
def sdpa_ref():
    return sdpa_attention


@pytest.fixture
def close():
    return assert_close


@pytest.fixture
def randomize():
    return randomize_


def load(src, name):
    """Run a learner's source as the notebook's kernel would (its lines readable for tracebacks, as IPython keeps
    them) and return what it defines as ``name``."""
    ns = {"__name__": "learner"}
    linecache.cache["<learner>"] = (len(src), None, src.splitlines(True), "<learner>")
    exec(compile(src, "<learner>", "exec"), ns)
    return ns[name]


def grade(exercise, src):
    """Grade the learner's source for ``exercise`` in this process, as check() does."""
    from course_utils.grade import grade_class  # here: most of the suite never needs the grader
    from course_utils.grade.exercises import get

    return grade_class(exercise, load(src, get(exercise).contract))


def run_grader(*args, env=None, timeout=300):
    """``python -m course_utils.grade ARGS`` in a subprocess from the repository root, as an instructor runs it."""
    return subprocess.run(
        [sys.executable, "-m", "course_utils.grade", *args],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def assert_reads_cleanly(result):
    """A verdict's report in English and Chinese: no repeated line, no infinite or 1e308 number, no doubled
    'not implemented'."""
    for report in (result.report("en"), result.report("zh")):
        lines = [line.strip() for line in report.splitlines() if line.strip()]
        assert len(lines) == len(set(lines)), report
        assert not re.search(r"e\+30[0-9]|difference (inf|nan)|误差 (inf|nan)", report), report
        assert report.count("not implemented yet") <= 1 and report.count("还没有") <= 1, report


def grader_texts() -> dict:
    """Every text of the grader, as data of the module that says it: {module: its TEXTS} (the exercises', the kinds',
    the sandbox child's, the grader's own modules')."""
    import importlib
    import pkgutil

    import course_utils.grade as grade

    found = {}
    for info in pkgutil.walk_packages(grade.__path__, grade.__name__ + "."):
        module = importlib.import_module(info.name)
        if isinstance(getattr(module, "TEXTS", None), dict):
            found[info.name] = module.TEXTS
    return found


def said(key: str, **args):
    """The grader's text ``key`` (a Msg), whichever module holds it: one module does, or the texts would be
    ambiguous."""
    from course_utils.grade.messages import said_in

    homes = [home for home, texts in grader_texts().items() if key in texts]
    assert len(homes) == 1, (key, homes)
    return said_in(homes[0], key, **args)
