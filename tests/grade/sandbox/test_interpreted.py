"""Triton kernels in the interpreter, watched (sandbox/interpreted.py): a store outside every tensor the kernel was
launched with is an error before it writes (it used to corrupt the heap of the process running it: the learner's
Jupyter kernel, the sandbox's child), a load inside a tensor's storage past its view is allowed (exercise 14's cases
pad their rows with NaN), an error inside a tl function is that function's, and everything is put back on exit."""

import importlib.util
import linecache
import os

import pytest
import torch

if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed (it has wheels for Linux only)", allow_module_level=True)
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from course_utils.grade.sandbox.interpreted import OutOfBounds, Watched  # noqa: E402

KERNELS = """
import triton
import triton.language as tl


@triton.jit
def read(X, Y, reach, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(Y + i, tl.load(X + i, mask=i < reach, other=-1.0))


@triton.jit
def write(X, Y, start, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(Y + start + i, tl.load(X + i))


@triton.jit
def dot(A, B, O, M: tl.constexpr, K: tl.constexpr, N: tl.constexpr):
    a = tl.load(A + tl.arange(0, M)[:, None] * K + tl.arange(0, K)[None, :])
    b = tl.load(B + tl.arange(0, M)[:, None] * K + tl.arange(0, K)[None, :])
    tl.store(O + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :], tl.dot(a, b))
"""


@pytest.fixture(scope="module")
def kernels():
    linecache.cache["<kernels>"] = (len(KERNELS), None, KERNELS.splitlines(True), "<kernels>")
    ns: dict = {}
    exec(compile(KERNELS, "<kernels>", "exec"), ns)
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(ns["read"], InterpretedFunction):
        pytest.skip("triton runs compiled in this process (a CUDA GPU)")
    return ns


def test_a_store_past_every_tensor_is_stopped_before_it_writes(kernels):
    x, y = torch.arange(16.0), torch.zeros(16)  # y's storage ends where its 16 elements do
    with Watched(), pytest.raises(OutOfBounds, match="tl.store reached memory outside"):
        kernels["write"][(1,)](x, y, 8, BLOCK=16)  # elements 8 .. 23 of a tensor of 16
    assert torch.equal(y, torch.zeros(16))  # nothing of the store was written


def test_a_load_inside_the_storage_of_a_view_is_allowed(kernels):
    padded = torch.full((40,), float("nan"))
    x, y = padded[:16], torch.zeros(32)
    x.copy_(torch.arange(16.0))
    with Watched():
        kernels["read"][(1,)](x, y, 24, BLOCK=32)  # 24 elements of a view of 16 over a storage of 40
    assert torch.equal(y[:16], torch.arange(16.0)) and torch.isnan(y[16:24]).all() and (y[24:] == -1).all()


def test_an_error_in_a_tl_function_is_said_as_its_own(kernels):
    a, b, o = torch.randn(16, 32), torch.randn(16, 32), torch.zeros(16, 16)
    with Watched(), pytest.raises(AssertionError, match=r"tl\.dot: input and other must have equal reduction"):
        kernels["dot"][(1,)](a, b, o, M=16, K=32, N=16)


def test_everything_is_put_back(kernels):
    from triton.runtime import interpreter

    before = (interpreter.GridExecutor.__call__, interpreter.InterpreterBuilder.create_masked_store)
    with Watched():
        assert interpreter.GridExecutor.__call__ is not before[0]
    assert (interpreter.GridExecutor.__call__, interpreter.InterpreterBuilder.create_masked_store) == before
