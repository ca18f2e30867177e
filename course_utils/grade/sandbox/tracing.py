"""What a submission runs, not what its source says: the fused attention it calls (the profiler's record of
every operator, torch's higher-order operators, and an input that records the torch functions applied to it)."""

from __future__ import annotations

import os
import traceback

import torch

# fused attention, as the dispatcher names its ops (aten::scaled_dot_product_attention and its CPU/flash/
# efficient/cuDNN/math kernels, nn.MultiheadAttention's fast path) and as torch names FlexAttention's operator
FUSED_OPS = (
    "scaled_dot_product",
    "flash_attention",
    "efficient_attention",
    "cudnn_attention",
    "multi_head_attention",
    "transformer_encoder_layer",
    "flex_attention",
)
PROFILER_STOPPED = "profiler:stopped"  # what the tracer records when the submission stopped it


def _fused(name: str) -> bool:
    return any(op in name for op in FUSED_OPS)


class Traced(torch.Tensor):
    """An input that records the torch functions applied to it and to everything computed from it, in any
    thread: sees nn.MultiheadAttention's Python-level forward, which computes its weights without a fused op.
    Only torch's own functions count: a learner's helper of the same name never reaches this hook."""

    seen: set = set()

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "") or ""
        owner = getattr(func, "__module__", "") or ""
        if isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):  # torch.ops.<namespace>.<op>
            owner = "torch" if getattr(func, "_qualified_op_name", "").startswith("aten::") else "torch.ops"
        if (
            isinstance(name, str)
            and isinstance(owner, str)
            and _fused(name)
            and owner.startswith("torch")
            and not owner.startswith("torch.ops")
        ):
            cls.seen.add(("F." if owner == "torch.nn.functional" else "") + name)
        return super().__torch_function__(func, types, args, kwargs or {})


class FusedTracer:
    """Records the fused attention a submission runs, where it runs: every operator call that reaches the
    dispatcher in any thread (the profiler's callbacks: eager, TorchScript, torch.library custom ops, vmap,
    compiled graphs, training and eval mode, backward) and every call of torch's higher-order operators
    (FlexAttention). Names in the source mean nothing here; only what executes is seen.

    A submission that stops the profiler is seen too (the profiler is not running when tracing ends)."""

    def __init__(self) -> None:
        self.seen: set = set()
        self._hop_call = None

    def __enter__(self):
        from torch._C._profiler import ProfilerActivity, _ExperimentalConfig
        from torch.autograd import ProfilerConfig, ProfilerState, _enable_profiler, _prepare_profiler

        config = ProfilerConfig(
            ProfilerState.KINETO, False, False, False, False, False, _ExperimentalConfig(profile_all_threads=True)
        )
        activities = {ProfilerActivity.CPU}
        level = os.environ.get(_KINETO_LOG_LEVEL)
        os.environ[_KINETO_LOG_LEVEL] = "6"  # the profiler's library logs its start and stop on stderr unless told
        try:
            _prepare_profiler(config, activities)
            _enable_profiler(config, activities)
        except RuntimeError:  # a profiler the submission left running: ours replaces it
            self._disable()
            _enable_profiler(config, activities)
        finally:
            if level is None:
                os.environ.pop(_KINETO_LOG_LEVEL, None)
            else:
                os.environ[_KINETO_LOG_LEVEL] = level
        hop = torch._ops.HigherOrderOperator
        seen, original = self.seen, hop.__call__
        self._hop_call = original

        def watched(op, *args, **kwargs):
            name = op.name() if callable(getattr(op, "name", None)) else ""
            if isinstance(name, str) and _fused(name):
                seen.add(name)
            return original(op, *args, **kwargs)

        hop.__call__ = watched
        return self

    @staticmethod
    def _disable():
        from torch.autograd import _disable_profiler

        return _disable_profiler()

    def __exit__(self, *exc):
        torch._ops.HigherOrderOperator.__call__ = self._hop_call
        with torch.autograd.profiler.record_function(_END):  # missing from the events if the profiler was stopped
            pass
        try:
            names = {e.name() for e in self._disable().events()}
        except RuntimeError:
            names = set()
        if _END not in names:
            self.seen.add(PROFILER_STOPPED)
        self.seen |= {name for name in names if name.startswith("aten::") and _fused(name)}
        return False


class FlexRefused(Exception):
    """What FlexAttention does in interview mode: it is recorded as called and not run."""


class RefusingFlex:
    """Interview mode: ``torch.nn.attention.flex_attention.flex_attention`` recorded as called (``Traced.seen``) and
    refused at once, instead of run. Its first call compiles the score function (seconds, many more on a loaded
    machine), so running it made the verdict depend on the machine's load: a delegating answer is refused whatever
    the time an import or a compilation takes. Entered before the submission's cells run, so that the name they
    import is this one; left as it was found on exit."""

    def __enter__(self):
        import torch.nn.attention.flex_attention as flex  # milliseconds once torch is imported

        self._module, self._original = flex, flex.flex_attention

        def flex_attention(*args, **kwargs):
            Traced.seen.add("flex_attention")
            raise FlexRefused("FlexAttention is fused attention: interview mode does not run it")

        flex.flex_attention = flex_attention
        return self

    def __exit__(self, *exc):
        self._module.flex_attention = self._original
        return False


_END = "grader: end of tracing"
_KINETO_LOG_LEVEL = "KINETO_LOG_LEVEL"  # read once, when the profiler first starts in a process
_FLEX_SOURCE = os.path.join("torch", "nn", "attention", "flex_attention.py")


def raised_by_flex(exc: BaseException) -> bool:
    """FlexAttention refused to run (on CPU it has no backward): the learner's code did call it."""
    return any(frame.filename.endswith(_FLEX_SOURCE) for frame in traceback.extract_tb(exc.__traceback__))
