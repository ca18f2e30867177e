"""Peak memory of the tensors a computation creates, measured on any device (CPU included).

``tracemalloc`` sees only Python's own allocator, not PyTorch's, and ``torch.cuda.max_memory_allocated`` only
CUDA. ``TensorMemoryTracker`` watches every tensor that a PyTorch function or tensor method returns while it is
active (a ``TorchFunctionMode``) and adds up the bytes of the storages alive at the same time. Buffers allocated
*inside* one call (a fused kernel's, or a composite function's temporaries) are invisible to it; its result is not.
A ``TorchFunctionMode`` rather than a ``TorchDispatchMode``: the latter would import torch._dynamo on first use,
several seconds.
"""

from __future__ import annotations

import weakref

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree


class TensorMemoryTracker(TorchFunctionMode):
    """``with TensorMemoryTracker() as mem: f()`` then ``mem.peak_bytes``: the most bytes of tensors created
    inside the block that were alive at once (views share their storage and count once), and ``mem.num_ops``:
    how many PyTorch functions and tensor methods were called (each a separate kernel, views aside)."""

    def __init__(self) -> None:
        super().__init__()
        self._live: dict[int, list] = {}  # storage address -> [bytes, number of live tensors on it]
        self.current_bytes = 0
        self.peak_bytes = 0
        self.num_ops = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.num_ops += 1
        inputs = {
            t.untyped_storage().data_ptr() for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)
        }
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self._track(t, inputs)
        return out

    def _track(self, t, inputs):
        storage = t.untyped_storage()
        key, nbytes = storage.data_ptr(), storage.nbytes()
        if key == 0:  # empty tensor
            return
        if key in self._live:
            self._live[key][1] += 1
        elif key in inputs:  # a view or in-place result of a tensor made outside: not ours to count
            return
        else:
            self._live[key] = [nbytes, 1]
            self.current_bytes += nbytes
            self.peak_bytes = max(self.peak_bytes, self.current_bytes)
        weakref.finalize(t, self._release, key)

    def _release(self, key):
        entry = self._live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.current_bytes -= entry[0]
            del self._live[key]


def peak_tensor_bytes(fn, *args, **kwargs) -> int:
    """The peak bytes of tensors alive at once while ``fn(*args, **kwargs)`` runs (its result included)."""
    with torch.no_grad(), TensorMemoryTracker() as mem:
        result = fn(*args, **kwargs)
        del result
    return mem.peak_bytes
