"""Write, once, the bytecode (.pyc) of what the course and a graded submission import: make setup's last step.

pip compiles every module it installs; uv compiles none (a first `import torch` then costs twice its CPU). A learner's
kernel would pay that once, but the grader's sandbox mounts the environment read-only and writes no bytecode, so
every sandboxed grading would compile torch again. Importing the modules here, where the environment is writable,
writes their .pyc: torch, numpy, matplotlib's figures, triton (where installed: exercise 14), the course's package
and every module of its grader (the sandbox's harness among them), then one grading in this process (the course's
own multi-head attention) for what torch imports only while a grading runs. Compiling the whole environment instead
(compileall) takes several times longer and adds about 200 MB of bytecode nothing imports.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
import time

# imported first and by name: the third-party modules a notebook, an exercise or a graded submission imports
LIBRARIES = (
    "torch",
    "torch.nn.functional",
    "torch.profiler._cupti_monitor",  # what the profiler imports when it starts (the interview notebook's timing)
    "numpy",
    "matplotlib.pyplot",
    "IPython.display",  # the interview notebook's timer and widgets
    "ipywidgets",
    "triton",  # exercise 14's kernels, run by triton's interpreter (what it imports to run one, too)
    "triton.language",
    "triton.language.extra.libdevice",
    "triton.compiler.code_generator",
    "triton.experimental.gluon",
)
# then these packages with every module in them
PACKAGES = ("course_utils", "course_utils.grade")


def modules() -> list[str]:
    """The names to import, in order (the packages' modules found on disk, so that a new exercise is included)."""
    names = list(LIBRARIES)
    for package in PACKAGES:
        names.append(package)
        try:
            path = importlib.import_module(package).__path__
        except ImportError:
            continue
        found = pkgutil.walk_packages(path, package + ".")
        names += [info.name for info in found if not info.name.endswith(".__main__")]  # a command, not a module
    return names


def _grade_once() -> None:
    """Grade the course's own attention in this process, as the notebook's check does, and do what a graded
    submission does besides: show a tensor, save a figure, and what the sandbox does with the plan and the result
    (torch.save and torch.load). What torch and matplotlib import only then is compiled too."""
    os.environ["ATTN_HISTORY"] = "off"  # not a learner's check: nothing recorded
    try:
        import io

        import matplotlib.pyplot as plt
        import torch

        import course_utils
        from course_utils.grade import check

        check("mha", course_utils.MultiHeadAttention, quiet=True)
        check("mha_interview", course_utils.MultiHeadAttention, quiet=True)  # interview mode: the profiler's trace
        out = course_utils.MultiHeadAttention(3, 2, 6, 0.0, num_heads=2)(course_utils.book_batch())
        repr(out)
        buffer = io.BytesIO()
        torch.save({"out": out.detach()}, buffer)
        torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)
        figure = plt.figure()
        figure.savefig(io.BytesIO(), format="png")
        plt.close(figure)
    except Exception as exc:  # noqa: BLE001 - the imports above are written all the same
        print(f"bytecode: the sample grading failed ({type(exc).__name__}: {exc})")


def main() -> int:
    sys.dont_write_bytecode = False  # writing it is this step's purpose, whatever PYTHONDONTWRITEBYTECODE says
    os.environ.setdefault("MPLBACKEND", "Agg")  # no window: the figures' modules are imported, nothing is drawn
    os.environ.setdefault("TRITON_INTERPRET", "1")  # as in the sandbox: no GPU compiler is looked for
    start, failed = time.perf_counter(), []
    before = len(sys.modules)
    for name in modules():
        try:
            importlib.import_module(name)
        except ImportError:  # triton on macOS, or WITH_TRITON=0: nothing to compile
            failed.append(name)
        except Exception as exc:  # noqa: BLE001 - a module that cannot load here still leaves the others compiled
            failed.append(f"{name} ({type(exc).__name__})")
    _grade_once()
    seconds = time.perf_counter() - start
    print(f"bytecode written for {len(sys.modules) - before} modules in {seconds:.1f} s", end="")
    print(f" (not importable here: {', '.join(failed)})" if failed else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
