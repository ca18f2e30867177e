"""How much a call of the learner's code builds: the largest floating-point tensor any torch function returns,
and how far the process's resident memory rises (a tiled computation never builds the whole score matrix)."""

from __future__ import annotations

import torch


def largest_float_tensor():
    """A TorchFunctionMode recording the largest floating-point tensor any torch function returns: a tiled
    computation never builds the full score matrix. (A TorchDispatchMode would import torch._dynamo, seconds
    that count against the sandbox's time limits.)"""
    from torch.overrides import TorchFunctionMode
    from torch.utils import _pytree as pytree

    class Largest(TorchFunctionMode):
        numel = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in pytree.tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.is_floating_point():
                    self.numel = max(self.numel, t.numel())
            return out

    return Largest()


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


class PeakMemory:
    """How far the whole process's resident memory rises during a block: every thread, any library (NumPy too),
    measured by the kernel, not by watching the code. Linux: free heap pages are returned first (malloc_trim),
    then the peak (VmHWM) is reset to the current size (clear_refs 5) and read afterwards. ``rise`` stays None
    where that cannot be done (another system)."""

    def __enter__(self):
        import ctypes
        import gc

        self.rise, self.start = None, None
        gc.collect()
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):
            pass
        try:
            with open("/proc/self/clear_refs", "w") as refs:
                refs.write("5")
            self.start = _status_kib("VmRSS")
        except OSError:
            pass
        return self

    def __exit__(self, *exc):
        peak = _status_kib("VmHWM")
        if self.start is not None and peak is not None:
            self.rise = max(0, peak - self.start) * 1024
        return False
