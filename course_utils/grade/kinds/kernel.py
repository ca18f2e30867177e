"""The kernel kind: a Triton kernel's launcher, a function the contract names, called as the function kind calls
one. The kernel runs in Triton's interpreter, on the CPU, everywhere it is graded (the notebook's kernel, the sandbox,
nbgrader), so that one file gets one verdict: the sandbox's environment says so (``env``).

Exercise 14 is of this kind."""

from __future__ import annotations

from .function import Function


class Kernel(Function):
    name = "kernel"
    env = {"TRITON_INTERPRET": "1"}  # no GPU in the sandbox: the kernels run interpreted


KIND = Kernel()
