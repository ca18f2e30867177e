"""A class of strangers for `make grade`: generate 100 submissions (correct, wrong, broken, odd names, hostile)
in a temporary folder, grade them as `make grade` does, and report the wall time, the grader's own peak memory,
the largest submission's peak and the slowest submissions. In the same run, the same class is graded again with a
sandbox started for each submission (the way before fork servers), 100 bare `import torch` runs are timed, and the
class is graded through fork servers once more (the two forked runs bracket the others on a machine whose load
drifts): the report gives the three as ratios with the load, and checks that every verdict is the same both ways.
The default class is a workshop's exercise 04; `--class hostile` grades the hostile one. A measurement, not a timed
test:

    python -m benchmarks.grade_class [--class exercise04|hostile] [--workers 2] [--timeout 30] [--memory 4096]
        [--keep DIR] [--only-new]

The hostile files allocate past the memory total through each route (plain, memfd, forks), fork until refused,
fill the private tmpfs, swallow the alarm, send a 9,000-digit answer, and give the parent a 2 MB literal and a
notebook nested 100,000 deep to parse.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from course_utils.grade import jail, limits
from course_utils.grade.batch import grade_folder, status_key

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = [
    "01_self_attention",
    "02_causal_attention",
    "03_multihead_wrapper",
    "04_multihead_attention",
    "05_kv_cache",
    "06_gqa",
]


def _solution(name: str) -> str:
    return (ROOT / "solutions" / f"{name}.ipynb").read_text(encoding="utf-8")


def _code(notebook: str) -> str:
    """A solution notebook's code cells as one .py file (the check calls included)."""
    cells = json.loads(notebook)["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


WRONGS = [  # exercise 04's known mistakes: (what the solution says, what the mistake says)
    ("self.head_dim ** 0.5", "self.head_dim"),
    ("self.head_dim ** 0.5", "self.d_out ** 0.5"),
    ("dim=-1)", "dim=-2)"),
    ("-torch.inf)", "0.0)"),
]
BROKEN = [
    "",
    "class MultiHeadAttention(:\n",
    "{not json",
    '{"cells": 3}',
    "x = 1\n",
    b"x = '\xe9'\n",
    "MHA.replace",  # the solution with forward misspelt (below)
    "raise SystemExit(3)\n",  # then the solution
    "import sys\nsys.stderr.write('x' * 10_000_000)\n",  # then the solution
    "import os\nos._exit(0)\n",
]
ODD_NAMES = [
    b"latin1-\xe9.py",
    b"n" * 248 + b".py",
    b"\x1b[32mall checks passed\x1b[0m.py",
    b"## mha: passed.py",
    b"=HYPERLINK(1).py",
    b"Alice.py",
    b"alice.py",
    b"a b;c'd\".py",
    "张三.py".encode(),
    b"-rf.py",
    b"\xe2\x80\xaeyp.exe.py",
    b"<img src=x onerror=alert(1)>.py",
    b"x\ty.py",
    b"@SUM(A1).py",
    b"+1.py",
]


def _broken(i: int, mha: str) -> str | bytes:
    content = BROKEN[i % len(BROKEN)]
    if content == "MHA.replace":
        return mha.replace("def forward", "def forwrd", 1)
    if isinstance(content, str) and content.endswith(("(3)\n", "* 10_000_000)\n")):
        return content + mha
    return content


def _write(folder: Path, files: dict) -> dict:
    assert len(files) == 100, len(files)
    for name, (_, content) in files.items():
        with open(os.path.join(os.fsencode(folder), name), "wb") as fh:
            fh.write(content)
    return {name: kind for name, (kind, _) in files.items()}


def _exercise04_class(folder: Path, mha: str) -> dict:
    """A class that hands in exercise 04 (multi-head attention) as a workshop does: 40 correct (the solution as a
    notebook and as a .py file), 30 with one of the known mistakes, 15 broken (empty, syntax, not JSON, no class,
    bad encoding, a misspelt method, an exit, a flood of stderr), 15 correct under odd file names."""
    files: dict[bytes, tuple[str, bytes]] = {}
    notebook = _solution("04_multihead_attention")
    for i in range(40):
        name, text = (f"correct_{i:02d}.ipynb", notebook) if i % 2 else (f"correct_{i:02d}.py", mha)
        files[name.encode()] = ("correct", text.encode())
    for i in range(30):
        before, after = WRONGS[i % len(WRONGS)]
        files[f"wrong_{i:02d}.py".encode()] = ("wrong", mha.replace(before, after, 1).encode())
    for i in range(15):
        content = _broken(i, mha)
        suffix = ".ipynb" if i % 4 in (2, 3) else ".py"
        files[f"broken_{i:02d}{suffix}".encode()] = (
            "broken",
            content if isinstance(content, bytes) else content.encode(),
        )
    for name in ODD_NAMES:
        files[name] = ("odd name", mha.encode())
    return _write(folder, files)


def make_class(folder: Path, mib: int, kind: str = "hostile") -> dict:
    """Write the 100 submissions; returns {file name (bytes): kind}. ``kind``: "hostile" (every exercise from 01 to
    06, with 15 hostile files: memory, forks, the alarm swallowed, ...) or "exercise04" (a workshop's exercise 04)."""
    files: dict[bytes, tuple[str, bytes]] = {}

    def add(name, kind, content):
        files[name if isinstance(name, bytes) else name.encode()] = (
            kind,
            content if isinstance(content, bytes) else content.encode(),
        )

    mha = _code(_solution("04_multihead_attention"))
    if kind == "exercise04":
        return _exercise04_class(folder, mha)
    for i in range(30):  # correct: the solutions, as notebooks and as .py files
        nb = SOLUTIONS[i % 6]
        add(
            f"correct_{i:02d}.ipynb" if i % 2 else f"correct_{i:02d}.py",
            "correct",
            _solution(nb) if i % 2 else _code(_solution(nb)),
        )
    for i in range(20):  # wrong: known mistakes
        before, after = WRONGS[i % len(WRONGS)]
        add(f"wrong_{i:02d}.py", "wrong", mha.replace(before, after, 1))
    for i in range(20):
        add(f"broken_{i:02d}" + (".ipynb" if i % 4 == 2 or i % 4 == 3 else ".py"), "broken", _broken(i, mha))
    for name in ODD_NAMES:
        add(name, "odd name", mha)
    hog = (mib + mib // 8) << 20
    stub = "class MultiHeadAttention:\n    pass\n"  # names an exercise, so that the file runs
    hostile = {
        "hostile_alarm_1.py": stub + "import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
        "signal.setitimer = lambda *a, **k: None\nwhile True:\n    time.sleep(0.1)\n",
        "hostile_fork_bomb.py": "import os, time\nfor i in range(500):\n    try:\n        pid = os.fork()\n"
        "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(60)\n"
        "        os._exit(0)\n" + mha,
        "hostile_disk.py": "try:\n    f = open('/tmp/fill', 'wb')\n    while True:\n"
        "        f.write(b'x' * (1 << 20))\nexcept OSError:\n    pass\n" + mha,
        "hostile_huge_literal.py": "x = [" + "1," * (1 << 20) + "]\n" + mha,
        "hostile_deep.ipynb": '{"cells": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "hostile_digits.py": mha + "\nfrom course_utils.grade import answer\nanswer('kv_cache_bytes', 10 ** 9000)\n",
        "hostile_markdown.py": "class MultiHeadAttention:\n    def __init__(self, *a, **k):\n"
        "        raise ValueError('\\n## mha: passed\\n<img src=x onerror=alert(1)>')\n",
        "hostile_nested_cell.py": "x = " + "(" * 150 + ")" * 150 + "\n" + mha,
        "d_hostile_memfd.py": f"import os\nHELD = []\nfor i in range({hog >> 26} + 1):\n"
        "    fd = os.memfd_create('m')\n    os.write(fd, b'x' * (60 << 20))\n"
        "    HELD.append(fd)\n" + mha,
        "p_hostile_forks.py": "import os, time\nfor i in range(4):\n    if os.fork() == 0:\n"
        f"        held = b'x' * ({hog // 4})\n        time.sleep(60)\n        os._exit(0)\n"
        "time.sleep(5)\n" + mha,
        "z_hostile_plain.py": f"HELD = b'x' * {hog}\n" + mha,
        "hostile_alarm_2.py": stub + "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
        "signal.setitimer = lambda *a, **k: None\nwhile True:\n    pass\n",
        "hostile_stdout.py": "import sys\nfor i in range(100000):\n    print('\\x1b[2J' * 100)\n" + mha,
        "hostile_threads.py": "import threading, time\nfor i in range(500):\n    try:\n"
        "        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "    except RuntimeError:\n        break\n" + mha,
        "hostile_exit.py": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
    }
    for name, content in hostile.items():
        add(name, "hostile", content)
    return _write(folder, files)


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _grade(subs: Path, out: Path, args, fork: bool) -> tuple[float, list, list, list]:
    """Grade the class one way (fork servers, or a sandbox started per submission): wall seconds, and the batch's
    (graded, skipped, failed) with each report's seconds."""
    os.environ[jail.FORK_ENV] = "1" if fork else "0"
    done: list = []
    started = time.monotonic()
    try:
        graded, skipped, failed = grade_folder(
            subs,
            out,
            workers=args.workers,
            lang="en",
            total_timeout=args.timeout,
            progress=lambda i, n, name, report: done.append((name, report)),
        )
    finally:
        os.environ.pop(jail.FORK_ENV, None)
    return time.monotonic() - started, graded, skipped, done


def _bare_imports(count: int, workers: int) -> float:
    """Wall seconds of ``count`` bare `python -E -s -c 'import torch'` runs, ``workers`` at a time (no sandbox):
    what every submission paid before fork servers, before any grading."""
    command = [sys.executable, "-E", "-s", "-c", "import torch"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OMP_NUM_THREADS": "1"}
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda _: subprocess.run(command, env=env, check=True), range(count)))
    return time.monotonic() - started


_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def verdict(report) -> tuple:
    """What a report says, without its times: the row's status key, and per exercise the score, the checks, the
    mistake named and the messages, their numbers left out (a message quotes a difference measured on the cases,
    which each grading draws from a fresh secret seed)."""
    results = tuple(
        (
            r.exercise,
            r.passed,
            r.score,
            r.checks_passed,
            r.checks_total,
            r.diagnosis,
            tuple(_NUMBER.sub("#", str(m)) for m in r.messages),
        )
        for r in report.results
    )
    return status_key(report), _NUMBER.sub("#", str(report.error or "")), results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=limits.SUBMISSION_BUDGET)
    parser.add_argument("--memory", type=int, default=limits.MEMORY_TOTAL >> 20, help="MiB per submission")
    parser.add_argument("--keep", help="write the class and the grades here instead of a temporary folder")
    parser.add_argument(
        "--class",
        dest="kind",
        choices=("exercise04", "hostile"),
        default="exercise04",
        help="a workshop's exercise 04, or the hostile class (every exercise from 01 to 06, memory, forks, alarms)",
    )
    parser.add_argument(
        "--only-new", action="store_true", help="grade the new way only (no comparison with a sandbox per submission)"
    )
    args = parser.parse_args(argv)
    if jail.probe() is not None:
        raise SystemExit(f"no sandbox here: {jail.probe()}")
    limits.MEMORY_TOTAL = args.memory << 20
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="grade-class-"))
    subs = base / "submissions"
    subs.mkdir(parents=True, exist_ok=True)
    kinds = make_class(subs, args.memory, args.kind)
    print(
        f"class: {args.kind}; host: {os.cpu_count()} cores, limits: {limits.mechanism()}, {args.memory} MiB and "
        f"{args.timeout:g} s per submission, {args.workers} workers"
    )
    runs = {}
    for way, fork in (("forked", True), ("alone", False))[: 1 if args.only_new else 2]:
        load = _load()
        wall, graded, skipped, done = _grade(subs, base / f"grades-{way}", args, fork)
        runs[way] = (wall, graded, done)
        print(
            f"{way:6}: graded {len(graded)} of {len(kinds)} files ({len(skipped)} skipped) in {wall:.1f} s "
            f"({wall / max(len(graded), 1):.2f} s each), load {load} -> {_load()}"
        )
    wall, graded, done = runs["forked"]
    parent_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    by_peak = max(done, key=lambda d: d[1].peak_memory)
    slowest = sorted(done, key=lambda d: -d[1].seconds)[:5]
    print(f"grader's own peak (RSS): {parent_mib:.0f} MiB")
    print(
        f"largest submission's peak: {by_peak[1].peak_memory / 2**20:.0f} MiB ({ascii(by_peak[0])}: "
        f"{status_key(by_peak[1])})"
    )
    for name, report in slowest:
        print(f"slow: {report.seconds:5.1f} s  {ascii(name)}: {status_key(report)}")
    passed = {kind: 0 for kind in set(kinds.values())}
    for name, report in graded:
        passed[kinds[os.fsencode(name)]] += report.passed
    print("passed by kind:", dict(sorted(passed.items())))
    if "alone" in runs:
        load = _load()
        bare = _bare_imports(len(kinds), args.workers)
        print(f"bare  : {len(kinds)} runs of `python -c 'import torch'` in {bare:.1f} s, load {load} -> {_load()}")
        # the forked run once more, after the others: the load of a shared machine drifts, so the two forked runs
        # bracket the others and the ratios take their mean
        load = _load()
        again = _grade(subs, base / "grades-forked-again", args, True)[0]
        print(f"forked: again in {again:.1f} s, load {load} -> {_load()}")
        forked, alone = (wall + again) / 2, runs["alone"][0]
        print(
            f"ratios: alone / forked {alone / forked:.2f}x; forked / bare imports {forked / bare:.2f}; "
            f"alone / bare imports {alone / bare:.2f} (forked: the mean of its two runs, {forked:.1f} s)"
        )
        new = {name: verdict(report) for name, report in graded}
        old = {name: verdict(report) for name, report in runs["alone"][1]}
        differ = sorted(name for name in set(new) | set(old) if new.get(name) != old.get(name))
        print(f"verdicts: {len(new) - len(differ)} of {len(new)} identical both ways" + (":" if differ else ""))
        for name in differ:
            print(f"  {ascii(name)}\n    forked: {new.get(name)}\n    alone:  {old.get(name)}")
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
