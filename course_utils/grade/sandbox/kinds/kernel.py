"""The child's side of the kernel kind: a Triton kernel's launcher, called as the function kind calls a function.
The kernel runs in Triton's interpreter (the grader's side sets TRITON_INTERPRET for the sandbox): on any CPU, the
same verdict everywhere."""

from __future__ import annotations

from .function import Function


class Kernel(Function):
    name = "kernel"


KIND = Kernel()
