"""Where a submission runs: a bubblewrap sandbox on Linux (read-only system and virtual environment, a
private size-limited directory holding only the submission's copy, no network, its own PID namespace so that
everything it starts dies with it, an unprivileged user, limits on memory, processes, file size and output;
the submission's total over all its processes is ``limits.Box``'s, a cgroup where the host offers one),
or, where no sandbox exists and the instructor said the submissions are trusted, a plain child process.

The child gets its plan on stdin and returns its result through a pipe; nothing of the grader or the
course's reference code is mounted in the sandbox: only the package ``sandbox/`` and the learner-side course_utils
(``build_lib``), and what an exercise's kind asks for (``mounts``, ``env``). This module is the parent's side: it builds
that tree and starts, limits and ends the child; it knows no exercise and no kind.

Starting Python and importing torch is most of a grading's time, so where it can, a sandboxed submission's process
is the child of a fork server (``ForkServer``: one sandbox per batch worker that imported torch once, running
``sandbox/forkserver.py``), made into what a sandbox of its own is before the submission runs; else, and where a kind
mounts more of the course (the capstone), a sandbox is started for the submission alone.
"""

from __future__ import annotations

import ast
import json
import os
import resource
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from . import limits
from .messages import Msg

# this module's texts, key -> (English, Chinese)
TEXTS: dict[str, tuple[str, str]] = {
    "sandbox.not_linux": (
        "bubblewrap sandboxes need Linux (this is {platform})",
        "bubblewrap 沙箱只能在 Linux 上用（这台机器是 {platform}）",
    ),
    "sandbox.no_bwrap": (
        "bubblewrap (bwrap) is not installed: apt-get install bubblewrap",
        "没有安装 bubblewrap (bwrap)：apt-get install bubblewrap",
    ),
    "sandbox.no_namespaces": (
        "bwrap cannot create its namespaces here: {error}",
        "bwrap 无法在这里创建命名空间：{error}",
    ),
}

MEMORY_CAP = 4 << 30  # address space: torch needs ~1 GiB just to import
MAX_FILE = 64 << 20  # any one file written
PRIVATE_DIR_SIZE = 64 << 20
MAX_RESULT = 64 << 20  # bytes read back from the result pipe
STDERR_TAIL = 4096  # bytes of stderr kept
SANDBOX_UID = 61000  # + this grader process's block + a slot number: see sandbox_uid
SLOTS_PER_GRADER = 64  # the uids of one grader process: one per worker slot

_SANDBOX = Path(__file__).resolve().parent / "sandbox"  # mounted as it is, a package at /grader/sandbox
_COURSE = _SANDBOX.parents[1]
# The answer boundary is a folder boundary. A submission's course_utils is the learner site's (its __init__ and
# a check() that only records) with every top-level module of course_utils beside it: the book's data, the device
# helpers, the figures; none implements an exercise. The subpackages are never mounted: grade/ (the verdict),
# reference/ (the answers), capstone/ (the course's GPT, built from the answers), but those an exercise's kind asks
# for in a sandbox that grades that exercise alone (``mounts``: the capstone's reference/ and capstone/, so that no
# other exercise is ever graded with its answer importable), their functions ``withheld`` replaced by a refusal.
_NOT_MOUNTED = shutil.ignore_patterns("__pycache__", "*.png")


class SandboxUnavailable(Exception):
    """No sandbox can be made on this machine (no bubblewrap, or the kernel refuses its namespaces)."""


def _without(source: str, module: str, withheld: Mapping[str, str]) -> str:
    """``source`` (of ``course_utils.<module>``) with the bodies of the top-level functions ``withheld`` (name ->
    what to do instead) replaced by a refusal that says so."""
    lines = source.splitlines(True)
    for node in sorted(
        (n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name in withheld),
        key=lambda n: n.lineno,
        reverse=True,
    ):
        first, last = node.body[0].lineno - 1, node.end_lineno
        indent = " " * node.body[0].col_offset
        why = withheld[node.name]
        refusal = f"course_utils.{module}.{node.name} is not available while a submission is graded: {why}"
        lines[first:last] = [f"{indent}raise ImportError({refusal!r})\n"]
    return "".join(lines)


def build_lib(dest: Path, mounts: Sequence[str] = (), withheld: Mapping[str, Mapping[str, str]] | None = None) -> Path:
    """The read-only tree mounted at /grader: the package ``sandbox/`` (the harness, the kinds' child sides, their
    texts), beside it the learner site's course_utils with the top-level modules of course_utils, and the course's
    subpackages ``mounts`` with their functions ``withheld`` ({file within course_utils: {function: what to do
    instead}}) replaced by a refusal."""
    shutil.copytree(
        _SANDBOX, dest / "sandbox", dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "learner_site")
    )
    site = dest / "course_utils"
    shutil.copytree(_SANDBOX / "learner_site" / "course_utils", site, dirs_exist_ok=True, ignore=_NOT_MOUNTED)
    for module in _COURSE.glob("*.py"):
        if module.name != "__init__.py":  # the learner site's __init__ stands in for the course's
            shutil.copy(module, site / module.name)
    for package in mounts:
        shutil.copytree(_COURSE / package, site / package, dirs_exist_ok=True, ignore=_NOT_MOUNTED)
    for name, functions in (withheld or {}).items():
        source = (_COURSE / name).read_text(encoding="utf-8")
        (site / name).write_text(_without(source, Path(name).stem, functions), encoding="utf-8")
    for path in [dest, *dest.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dest


_probe_result: list = []
_bwrap: list = []  # bubblewrap's absolute path, found on PATH once: the sandbox starts with an empty environment


def bwrap() -> str:
    if not _bwrap:
        found = shutil.which("bwrap")
        _bwrap.append(os.path.abspath(found) if found else "bwrap")
    return _bwrap[0]


def probe() -> str | None:
    """None when the sandbox works here, else why not (tried once per process)."""
    if _probe_result:
        return _probe_result[0]
    why = None
    if not sys.platform.startswith("linux"):
        why = Msg("sandbox.not_linux", platform=sys.platform)
    elif shutil.which("bwrap") is None:
        why = Msg("sandbox.no_bwrap")
    else:
        proc = subprocess.run(
            [bwrap(), *_namespaces(), "--ro-bind", "/", "/", "--", "true"], capture_output=True, text=True, timeout=30
        )
        if proc.returncode != 0:
            why = Msg("sandbox.no_namespaces", error=proc.stderr.strip()[:200])
    _probe_result.append(why)
    return why


def _namespaces() -> list:
    if os.geteuid() == 0:  # root makes the namespaces itself and drops to an unprivileged user inside
        return ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    return ["--unshare-all"]  # an ordinary user: a user namespace too, mapped to that (unprivileged) user


def _ro_bind_with_parents(path: str, made: set) -> list:
    """bwrap makes missing parents 0700; make them 0755 so that the unprivileged user can pass."""
    args, parts = [], Path(path).parts
    for i in range(2, len(parts)):
        parent = str(Path(*parts[:i]))
        if parent not in made and parent not in ("/usr", "/etc", "/tmp"):
            made.add(parent)
            args += ["--perms", "0755", "--dir", parent]
    return args + ["--ro-bind", path, path]


def child(lib: str, result_fd: int) -> list:
    """The child's command after its Python: the harness's ``main``, with the mounted tree ``lib`` first on sys.path
    (the sandbox package and the learner site's course_utils), the plan on stdin, the result to ``result_fd``."""
    boot = f"import sys; sys.path[0] = {lib!r}; from sandbox.harness import main; main(int(sys.argv[1]))"
    return ["-E", "-s", "-c", boot, str(result_fd)]


def command(
    lib: Path, submission_fd: int, submission_name: str, result_fd: int, slot: int, env: Mapping[str, str] | None = None
) -> list:
    """The bwrap command line that runs the harness on one submission, with the environment ``env`` beside the
    sandbox's own (what a kind's child needs: exercise 14's Triton interpreter)."""
    submission = ["--perms", "0777", "--size", str(PRIVATE_DIR_SIZE), "--tmpfs", "/submission"]
    submission += ["--file", str(submission_fd), f"/submission/{submission_name}", "--chdir", "/submission"]
    cmd = _sandbox(lib, submission, env)
    if os.geteuid() == 0:
        uid = str(sandbox_uid(slot))
        cmd += [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
        ]
    return cmd + [_python(), *child("/grader", result_fd)]


def _python() -> str:
    return os.path.join(sys.prefix, "bin", "python3")


def _sandbox(lib: Path, submission: list, env: Mapping[str, str] | None = None) -> list:
    """bwrap's arguments up to the command it runs: the mounts, the namespaces, the environment (the sandbox's own and
    ``env``); ``submission``: what /submission is."""
    prefixes = sorted({os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)})
    made: set = set()
    cmd = [
        bwrap(),
        *_namespaces(),
        "--die-with-parent",
        "--new-session",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--symlink",
        "usr/bin",
        "/bin",
        "--symlink",
        "usr/sbin",
        "/sbin",
    ]
    for etc in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime"):
        if os.path.exists(etc):
            cmd += ["--ro-bind", etc, etc]
    # the private /tmp first: the Python or the venv may live under /tmp, and their binds go on top of it
    cmd += ["--perms", "1777", "--size", str(PRIVATE_DIR_SIZE), "--tmpfs", "/tmp"]
    for prefix in prefixes:
        cmd += _ro_bind_with_parents(prefix, made)
    if os.path.realpath(sys.prefix) != sys.prefix:  # the venv reached through a link
        cmd += _ro_bind_with_parents(sys.prefix, made)
    cmd += [
        "--ro-bind",
        str(lib),
        "/grader",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--size",
        str(PRIVATE_DIR_SIZE),
        "--tmpfs",
        "/dev/shm",  # else unbounded
        *submission,
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
        "--setenv",
        "HOME",
        "/submission",
        "--setenv",
        "OMP_NUM_THREADS",
        "1",
        "--setenv",
        "MPLBACKEND",
        "Agg",
        "--setenv",
        "PYTHONDONTWRITEBYTECODE",
        "1",
        "--setenv",
        "PYTHONWARNINGS",
        "ignore",
    ]
    for name, value in (env or {}).items():
        cmd += ["--setenv", name, value]
    return cmd + ["--"]


def sandbox_uid(slot: int) -> int:
    """The unprivileged user a sandbox runs as (when the grader is root): its own per worker slot, and a block of
    its own per grader process, so that RLIMIT_NPROC (which counts a user's processes and threads host-wide) is never
    shared between parallel submissions, nor between two graders running at once (two batches, test workers)."""
    return SANDBOX_UID + (os.getpid() % 256) * SLOTS_PER_GRADER + slot % SLOTS_PER_GRADER


def _user_processes() -> int:
    uid = os.getuid()
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                count += os.stat(f"/proc/{entry}").st_uid == uid
            except OSError:
                pass
    return count


def _limits(nproc: int, box=None):
    def apply():
        if box is not None:
            box.preexec()
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE, MAX_FILE))
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

    return apply


class Outcome:
    def __init__(
        self,
        returncode,
        result: bytes,
        stderr_tail: str,
        timed_out: bool,
        too_big: bool,
        usage: limits.Usage | None = None,
        cpu_seconds: float = 0.0,
    ):
        self.returncode, self.result, self.stderr_tail = returncode, result, stderr_tail
        self.timed_out, self.too_big = timed_out, too_big
        self.usage = usage or limits.Usage()
        self.cpu_seconds = cpu_seconds  # what its processes computed: what it spent of a CPU-time budget


def _drain(stream, keep: int, sink: list[tuple[bytes, bool]], limit: int | None = None):
    """Read ``stream`` to the end, keeping the last ``keep`` bytes (or the first ``limit``, flagging more)."""
    tail = b""
    total = 0
    for chunk in iter(lambda: stream.read(65536), b""):
        total += len(chunk)
        if limit is not None:
            if total <= limit:
                tail += chunk
        else:
            tail = (tail + chunk)[-keep:]
    sink.append((tail, limit is not None and total > limit))


def run(
    submission: Path,
    plan: bytes,
    *,
    timeout: float,
    wall: float | None = None,
    slot: int = 0,
    sandboxed: bool = True,
    mounts: Sequence[str] = (),
    withheld: Mapping[str, Mapping[str, str]] | None = None,
    env: Mapping[str, str] | None = None,
) -> Outcome:
    """Run the harness on ``submission`` with ``plan``, the course's subpackages ``mounts`` (their functions
    ``withheld``) and the environment ``env`` added for the plan's kinds; the submission itself is only read. In the
    sandbox, a child of a fork server where one can be had and the kinds mount nothing more, else a sandbox started
    for this submission alone. ``timeout``: CPU seconds; ``wall``: the wall-clock backstop (default
    ``limits.WALL_FACTOR`` times ``timeout``). The Outcome says the CPU time the run used (``cpu_seconds``)."""
    wall = timeout * limits.WALL_FACTOR if wall is None else wall
    if sandboxed and not mounts and not withheld and fork_servers_wanted():
        server = _servers.take()
        if server is not None:
            try:
                outcome = server.run(submission, plan, timeout=timeout, wall=wall, env=env)
            except ServerGone:  # the server itself failed (never the submission): this one is graded alone
                server.close()
            else:
                _servers.give_back(server)
                return outcome
    return _run_alone(
        submission,
        plan,
        timeout=timeout,
        wall=wall,
        slot=slot,
        sandboxed=sandboxed,
        mounts=mounts,
        withheld=withheld,
        env=env,
    )


def _run_alone(
    submission: Path,
    plan: bytes,
    *,
    timeout: float,
    wall: float,
    slot: int,
    sandboxed: bool,
    mounts: Sequence[str],
    withheld: Mapping[str, Mapping[str, str]] | None,
    env: Mapping[str, str] | None,
) -> Outcome:
    """One process for this submission: a bubblewrap sandbox, or (trusted) a plain child process."""
    result_r, result_w = os.pipe()
    with tempfile.TemporaryDirectory(prefix="grade-lib-") as tmp, open(submission, "rb") as sub:
        lib = build_lib(Path(tmp) / "lib", mounts, withheld)
        if sandboxed:
            if probe() is not None:
                raise SandboxUnavailable(probe())
            os.set_inheritable(sub.fileno(), True)
            cmd = command(lib, sub.fileno(), "submission" + submission.suffix, result_w, slot, env)
            tasks = limits.MAX_TASKS if limits.mechanism() != "rlimits" else limits.FALLBACK_TASKS
            nproc = tasks if os.geteuid() == 0 else _user_processes() + tasks
            cwd, env = tmp, {}
        else:  # trusted: a plain child process in a private temporary directory
            private = Path(tmp) / "submission"
            private.mkdir()
            shutil.copyfile(submission, private / ("submission" + submission.suffix))
            cmd = [sys.executable, *child(str(lib), result_w)]
            nproc = _user_processes() + limits.MAX_TASKS
            cwd = str(private)
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": str(private),
                "OMP_NUM_THREADS": "1",
                "MPLBACKEND": "Agg",
                "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONWARNINGS": "ignore",
                **(env or {}),
            }  # as in the sandbox
        box = limits.Box()  # the submission's total: memory over all its processes, tasks (see limits.py)
        try:
            proc = subprocess.Popen(
                cmd,
                cwd=cwd,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(result_w, sub.fileno()),
                start_new_session=True,
                preexec_fn=_limits(nproc, box),
            )
        except BaseException:
            box.close()
            raise
        box.watch(proc.pid)
        os.close(result_w)
        errs: list[tuple[bytes, bool]] = []  # (what was read, whether it went past the limit)
        results: list[tuple[bytes, bool]] = []
        readers = [
            threading.Thread(target=_drain, args=(proc.stderr, STDERR_TAIL, errs), daemon=True),
            threading.Thread(target=_drain, args=(os.fdopen(result_r, "rb"), 0, results, MAX_RESULT), daemon=True),
        ]
        for t in readers:
            t.start()
        assert proc.stdin is not None  # stdin=PIPE
        try:
            proc.stdin.write(plan)
            proc.stdin.close()
        except BrokenPipeError:
            pass
        timed_out, cpu = _wait(proc, timeout, wall)
        cpu = max(cpu, _kill_group(proc))
        usage = box.close()  # also kills what escaped the session (a cgroup holds every descendant)
        for t in readers:
            t.join(timeout=10)
    stderr = errs[0][0].decode("utf-8", "replace") if errs else ""
    result, too_big = results[0] if results else (b"", False)
    return Outcome(proc.returncode, result, stderr, timed_out, too_big, usage, cpu)


def _wait(proc, budget: float, wall: float | None = None) -> tuple[bool, float]:
    """Wait for the child: (whether it ran out of time, the CPU seconds its processes used). Its budget is CPU time
    (limits.tree_cpu_seconds), so that a busy machine or slow page faults never turn a correct submission into a
    timeout; one that waits instead of computing is stopped after ``wall`` seconds (default ``limits.WALL_FACTOR``
    budgets). Without /proc: wall time alone, and the time it used is the wall time it took."""
    wall = budget * limits.WALL_FACTOR if wall is None else wall
    return _watch(lambda within: _reaped(proc, within), proc.pid, budget, wall)


def _watch(ended: Callable[[float], float | None], pid: int, budget: float, wall: float) -> tuple[bool, float]:
    """The clock of a child ``pid`` (a sandbox of its own, or a fork server's): (whether it ran out of time, the CPU
    seconds its processes used). ``ended(within)``: the CPU seconds the kernel counted for it, once it ends within
    ``within`` seconds; None while it runs. Stopped past ``budget`` CPU seconds over its process tree, or ``wall``
    seconds of the clock; without /proc, ``budget`` seconds of the clock, and the time it used is the time it took."""
    started = time.monotonic()
    if not os.path.isdir("/proc"):
        return ended(budget) is None, time.monotonic() - started
    used = 0.0
    while True:
        counted = ended(0.2)
        if counted is not None:  # what it and every process it reaped used, and at least what was last seen
            return False, max(used, counted)
        used = max(used, limits.tree_cpu_seconds(pid))
        if time.monotonic() - started > wall or used > budget:
            return True, used


def _reaped(proc, within: float) -> float | None:
    """Reap ``proc`` if it ends within ``within`` seconds: the CPU seconds it used with every descendant it (or they)
    reaped, the kernel's count (wait4); None while it runs."""
    deadline = time.monotonic() + within
    while True:
        try:
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        except ChildProcessError:  # reaped already: Popen has its code, the kernel's count is gone
            proc.poll()
            return 0.0
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return rusage.ru_utime + rusage.ru_stime
        if time.monotonic() >= deadline:
            return None
        time.sleep(min(0.02, max(0.0, deadline - time.monotonic())))


def _kill_group(proc) -> float:
    """Kill the child's whole session (in the sandbox, bwrap's death ends its PID namespace too); the CPU seconds
    wait4 reports for it where it is reaped here (0 where it was reaped before)."""
    try:
        os.killpg(proc.pid, 9)
    except (ProcessLookupError, PermissionError):
        pass
    if proc.returncode is not None:
        return 0.0
    try:
        _, status, rusage = os.wait4(proc.pid, 0)
    except ChildProcessError:  # reaped already: Popen has its code, the kernel's count is gone
        proc.wait()
        return 0.0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return rusage.ru_utime + rusage.ru_stime


# ------------------------------------------------------------------------------------------------------
# fork servers: one sandbox per grading worker that has imported torch once, forking a child per submission

SET_UP = b"ready"  # what a fork server's child says once it is made (sandbox/forkserver.py)
FORK_ENV = "ATTN_GRADE_FORK"  # "0": every submission in a sandbox started for it alone (the path before fork servers)
SERVER_START_TIMEOUT = 120.0  # seconds for a server to import torch and say it is ready (a loaded machine)


def fork_servers_wanted() -> bool:
    return os.environ.get(FORK_ENV, "1").strip() != "0" and sys.platform.startswith("linux")


def _reader(stream, keep: int, limit: int | None = None) -> tuple[threading.Thread, list]:
    sink: list[tuple[bytes, bool]] = []
    thread = threading.Thread(target=_drain, args=(stream, keep, sink, limit), daemon=True)
    thread.start()
    return thread, sink


class ServerGone(Exception):
    """The fork server ended or stopped answering: its submission is graded the other way."""


class ForkServer:
    """One worker's fork server (``sandbox/forkserver.py`` in the sandbox of ``_sandbox``, as root with the
    capabilities it needs to make each child's namespaces; each child drops them all before the harness runs).
    ``run()`` grades one submission in a fresh child, with the same limits as a sandbox of its own: the child is put
    in the submission's ``limits.Box`` before it may go on, killed with everything it started when it ends or its
    time is up, and given its own temporary trees."""

    def __init__(self, uid_slot: int):
        # root: each server's children run as an unprivileged user of their own; otherwise, in the sandbox's user
        # namespace, as the grader's user (as the harness does in a sandbox of its own)
        self.uid = sandbox_uid(uid_slot) if os.geteuid() == 0 else os.getuid()
        self._tmp = tempfile.TemporaryDirectory(prefix="grade-forkserver-")
        lib = build_lib(Path(self._tmp.name) / "lib")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)  # each message with its sender's pid, ours
        self.sock = ours
        cmd = _sandbox(lib, ["--dir", "/submission", "--chdir", "/"])
        if os.geteuid() != 0:  # the capabilities to make each child's namespaces, inside the sandbox's user namespace
            cmd[-1:] = ["--cap-add", "ALL", "--"]
        boot = "import sys; sys.path[0] = '/grader'; from sandbox.forkserver import main; main(int(sys.argv[1]))"
        cmd += [_python(), "-E", "-s", "-c", boot, str(theirs.fileno())]
        self._log = open(Path(self._tmp.name) / "server.log", "w+b")  # noqa: SIM115 - read if it fails to start
        try:
            self.proc = subprocess.Popen(
                cmd,
                cwd=self._tmp.name,
                env={},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._log,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
            )
        finally:
            theirs.close()
        ours.settimeout(SERVER_START_TIMEOUT)
        try:
            ready = json.loads(ours.recv(1 << 16) or b"{}")
        except (OSError, ValueError):
            ready = {}
        if "ready" not in ready:
            self.close()
            self._log.seek(0)
            raise ServerGone(self._log.read()[-500:].decode("utf-8", "replace"))

    def _host_pid(self, pid: int) -> int:
        """The host's pid of the server's child ``pid`` (a pid in the sandbox's PID namespace)."""
        for candidate in limits.descendants(self.proc.pid):
            try:
                with open(f"/proc/{candidate}/status") as fh:
                    ns = next(line for line in fh if line.startswith("NSpid:")).split()[1:]
            except (OSError, StopIteration):
                continue
            if len(ns) >= 2 and int(ns[-1]) == pid and candidate != self.proc.pid:
                return candidate
        raise ServerGone(f"no process {pid} in the server's sandbox")

    def _ask(self, request: dict, fds: list[int]) -> int:
        """Hand the server a submission's request: the child's pid on the host (the kernel's translation of the
        credentials the child sent), or found through its pid in the sandbox where none came."""
        self.sock.settimeout(30)
        try:
            socket.send_fds(self.sock, [json.dumps(request).encode()], fds)
            message, ancillary, _, _ = self.sock.recvmsg(1 << 16, socket.CMSG_SPACE(12))
            answer = json.loads(message or b"{}")
        except (OSError, ValueError) as exc:
            raise ServerGone(str(exc)) from exc
        if "pid" not in answer:
            raise ServerGone(str(answer))
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(data) >= 12:
                host_pid = struct.unpack("3i", data[:12])[0]
                if host_pid > 0:
                    return host_pid
        return self._host_pid(int(answer["pid"]))

    def _status(self, timeout: float | None) -> tuple[int, float] | None:
        """(the child's exit code, the CPU seconds the server's wait4 counted for it and what it reaped), when the
        server says it ended within ``timeout`` seconds (else None)."""
        self.sock.settimeout(timeout)
        try:
            answer = json.loads(self.sock.recv(1 << 16) or b"{}")
        except TimeoutError:
            return None
        except (OSError, ValueError) as exc:
            raise ServerGone(str(exc)) from exc
        if "status" not in answer:
            raise ServerGone(str(answer))
        cpu = answer.get("cpu")
        return int(answer["status"]), float(cpu) if isinstance(cpu, (int, float)) else 0.0

    def _wait(self, host_pid: int, budget: float, wall: float) -> tuple[int | None, float]:
        """(the child's exit code, or None when it ran out of time; the CPU seconds it used): as for a sandbox of its
        own (``_wait``), a budget of CPU time over the child's processes, and ``wall`` seconds as the backstop."""
        codes: list[int] = []

        def ended(within: float) -> float | None:
            said = self._status(within)
            if said is None:
                return None
            codes.append(said[0])
            return said[1]

        timed_out, used = _watch(ended, host_pid, budget, wall)
        return None if timed_out else codes[0], used

    def run(
        self,
        submission: Path,
        plan: bytes,
        *,
        timeout: float,
        wall: float,
        env: Mapping[str, str] | None = None,
    ) -> Outcome:
        """Grade ``submission`` with ``plan`` in a new child, with the environment ``env`` added (a kind's), within
        ``timeout`` CPU seconds and ``wall`` seconds (``run`` says both)."""
        tasks = limits.MAX_TASKS if limits.mechanism() != "rlimits" else limits.FALLBACK_TASKS
        nproc = tasks if os.geteuid() == 0 else _user_processes() + tasks  # RLIMIT_NPROC counts the whole user's
        request = {
            "name": "submission" + submission.suffix,
            "uid": self.uid,
            "tmp_size": PRIVATE_DIR_SIZE,
            "env": dict(env or {}),
            "rlimits": {
                "RLIMIT_AS": MEMORY_CAP,
                "RLIMIT_CORE": 0,
                "RLIMIT_FSIZE": MAX_FILE,
                "RLIMIT_NOFILE": 256,
                "RLIMIT_NPROC": nproc,
            },
        }
        plan_r, plan_w = os.pipe()
        result_r, result_w = os.pipe()
        err_r, err_w = os.pipe()
        go_r, go_w = os.pipe()
        ready_r, ready_w = os.pipe()
        box: limits.Box | None = limits.Box()
        sub = open(submission, "rb")  # noqa: SIM115 - handed to the child, closed below
        ours = [plan_w, result_r, err_r, go_w, ready_r]
        try:
            try:
                host_pid = self._ask(request, [plan_r, result_w, err_w, sub.fileno(), go_r, ready_w])
            finally:
                for fd in (plan_r, result_w, err_w, go_r, ready_w):
                    os.close(fd)
                sub.close()
            assert box is not None
            box.enter(host_pid)  # before it goes on: everything it starts is the submission's
            box.watch(host_pid)
            os.write(go_w, b"g")
            os.close(go_w)
            ours.remove(go_w)
            err_thread, errs = _reader(os.fdopen(err_r, "rb"), STDERR_TAIL)
            ours.remove(err_r)
            result_thread, results = _reader(os.fdopen(result_r, "rb"), 0, MAX_RESULT)
            ours.remove(result_r)
            try:
                with os.fdopen(plan_w, "wb") as stdin:
                    ours.remove(plan_w)
                    stdin.write(plan)
            except BrokenPipeError:
                pass
            status, cpu = self._wait(host_pid, timeout, wall)
            timed_out = status is None
            if timed_out:
                try:
                    os.kill(host_pid, 9)  # its namespace's first process dies with it, and with that every process
                except ProcessLookupError:
                    pass
                ended = self._status(30)
                if ended is None:
                    raise ServerGone("the server did not reap a killed child")
                status, cpu = ended[0], max(cpu, ended[1])
            with os.fdopen(ready_r, "rb") as said:
                ours.remove(ready_r)
                made = said.read(len(SET_UP)) == SET_UP
            usage, box = box.close(), None  # also kills what escaped (a cgroup holds every descendant)
            for t in (err_thread, result_thread):
                t.join(timeout=10)
            if not made and not timed_out:  # the server could not make the child: nothing of the submission ran
                _servers.cannot_make_children()
                raise ServerGone("the child was not made: " + (errs[0][0] if errs else b"").decode("utf-8", "replace"))
        finally:
            for fd in ours:
                os.close(fd)
            if box is not None:
                box.close()
        stderr = errs[0][0].decode("utf-8", "replace") if errs else ""
        result, too_big = results[0] if results else (b"", False)
        returncode = -9 if timed_out else status
        return Outcome(returncode, result, stderr, timed_out, too_big, usage, cpu)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        try:
            self.sock.close()
        finally:
            try:
                os.killpg(self.proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait()
            self._log.close()
            self._tmp.cleanup()


class _Servers:
    """The idle fork servers of this process, one taken per running grading (so one per batch worker)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._idle: list[ForkServer] = []
        self._count = 0
        self._failed: str | None = None

    def take(self) -> ForkServer | None:
        if probe() is not None:
            return None
        with self._lock:
            if self._failed is not None:
                return None
            while self._idle:
                server = self._idle.pop()
                if server.alive():
                    return server
                server.close()
            self._count += 1
            uid_slot = SLOTS_PER_GRADER - self._count  # from the top of this grader's uids, away from slot 0, 1...
        try:
            return ForkServer(uid_slot)
        except (ServerGone, OSError) as exc:
            with self._lock:
                self._failed = str(exc) or type(exc).__name__
            return None

    def cannot_make_children(self) -> None:
        """A server started but could not make a child (this host refuses a namespace or a mount): from now on,
        every submission in a sandbox of its own."""
        with self._lock:
            self._failed = "the fork server cannot make children here"

    def give_back(self, server: ForkServer) -> None:
        with self._lock:
            if server.alive():
                self._idle.append(server)
                return
        server.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle, self._count = self._idle, [], 0
        for server in idle:
            server.close()


_servers = _Servers()


def close_servers() -> None:
    """End this process's idle fork servers (a batch does when it is done; they also die with this process)."""
    _servers.close()
