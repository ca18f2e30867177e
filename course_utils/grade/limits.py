"""One submission's total limits: memory over all its processes (shared memory, memfd and its tmpfs files
included), processes, wall time. Applied by the parent from outside the sandbox, with the strongest mechanism
this host offers, chosen once per grader process (``mechanism()``):

- ``cgroup2``: a cgroup v2 per submission (memory.max, memory.swap.max=0, pids.max), where the grader runs in a
  cgroup delegated to it (e.g. ``systemd-run --scope -p Delegate=yes make grade``) or as root in one it may
  write. The kernel charges every page the submission's processes fault in, tmpfs and memfd included, and
  OOM-kills inside that cgroup only.
- ``cgroup1``: the same with the v1 ``memory`` and ``pids`` controllers (memory.limit_in_bytes, memsw where swap
  accounting exists, pids.max), as root on a host that mounts them writable.
- ``rlimits`` (the fallback, no cgroup): per-process RLIMIT_AS times a small RLIMIT_NPROC bounds the worst case,
  and a watchdog thread sums, every ``SAMPLE_SECONDS``, the resident memory of the submission's processes and
  the size of the memfd / shared-memory files they hold, and kills the whole submission past the total. It is a
  sample: between two samples a submission can overshoot by what it allocates in that time (never more than
  the rlimits allow).

``ATTN_GRADE_LIMITS=rlimits`` forces the fallback (tests, or a host whose cgroups misbehave).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

MEMORY_TOTAL = 4 << 30  # all of one submission's processes, shared memory and tmpfs together
MAX_TASKS = 64  # processes and threads in the submission's cgroup (and of the sandbox's user)
FALLBACK_TASKS = 16  # without a cgroup: RLIMIT_NPROC (per sandbox user), so RLIMIT_AS x 16 at worst
SAMPLE_SECONDS = 0.1  # the fallback's watchdog
SUBMISSION_BUDGET = 30.0  # CPU seconds per submission, all its sandboxes together (--timeout)
WALL_FACTOR = 4  # a submission that waits instead of computing (sleeps, blocks) is stopped at this many budgets
ENV = "ATTN_GRADE_LIMITS"

_CGROUP_ROOT = Path("/sys/fs/cgroup")
_chosen: list = []
_lock = threading.Lock()
_counter = [0]


def _own_cgroups() -> dict[str, str]:
    """{controller or '' for v2: path} from /proc/self/cgroup."""
    out: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            for ctl in parts[1].split(",") if parts[1] else [""]:
                out[ctl] = parts[2]
    return out


def _mounts() -> dict[str, tuple[str, str]]:
    """{'cgroup2': (mount point, the hierarchy's path mounted there), 'memory': (...) for v1, 'pids': (...)} from
    /proc/self/mountinfo."""
    out: dict[str, tuple[str, str]] = {}
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(fields) < 5 or len(rfields) < 3:
            continue
        root, point, fstype, options = fields[3], fields[4], rfields[0], rfields[2].split(",")
        if fstype == "cgroup2":
            out.setdefault("cgroup2", (point, root))
        elif fstype == "cgroup":
            for ctl in ("memory", "pids"):
                if ctl in options:
                    out.setdefault(ctl, (point, root))
    return out


def _where(mount, own_path: str) -> Path:
    """The directory of the cgroup ``own_path`` under ``mount`` (point, root): a container may mount a subtree."""
    point, root = mount
    if root != "/" and (own_path == root or own_path.startswith(root + "/")):
        own_path = own_path[len(root) :]
    return Path(point) / own_path.lstrip("/")


def _write(path: Path, value: str):
    with open(path, "w") as fh:
        fh.write(value)


def _probe_v2(mounts, own):
    if "cgroup2" not in mounts or "" not in own:
        return None
    base = _where(mounts["cgroup2"], own[""])
    try:
        controllers = (base / "cgroup.controllers").read_text().split()
    except OSError:
        return None
    if not {"memory", "pids"} <= set(controllers) or not os.access(base, os.W_OK):
        return None
    # the "no internal processes" rule: the grader moves into a leaf of its own before it enables the controllers
    # for the submissions' cgroups beside it
    try:
        leaf = base / f"grader-{os.getpid()}"
        leaf.mkdir(exist_ok=True)
        _write(leaf / "cgroup.procs", "0")
        _write(base / "cgroup.subtree_control", "+memory +pids")
        probe = base / f"probe-{os.getpid()}"
        probe.mkdir(exist_ok=True)
        ok = (probe / "memory.max").exists() and (probe / "pids.max").exists()
        probe.rmdir()
    except OSError:
        return None
    return ("cgroup2", base) if ok else None


def _probe_v1(mounts, own):
    if "memory" not in mounts or "pids" not in mounts or "memory" not in own or "pids" not in own:
        return None
    bases = {ctl: _where(mounts[ctl], own[ctl]) for ctl in ("memory", "pids")}
    try:
        for ctl, base in bases.items():
            probe = base / f"grade-probe-{os.getpid()}"
            probe.mkdir(exist_ok=True)
            ok = (probe / ("memory.limit_in_bytes" if ctl == "memory" else "pids.max")).exists()
            probe.rmdir()
            if not ok:
                return None
    except OSError:
        return None
    return ("cgroup1", bases)


def mechanism() -> str:
    """'cgroup2', 'cgroup1' or 'rlimits': what limits a submission's total on this host (decided once)."""
    return _choice()[0]


def _choice():
    with _lock:
        if not _chosen:
            found = None
            if os.environ.get(ENV, "").strip() != "rlimits" and os.path.isdir(_CGROUP_ROOT):
                mounts, own = _mounts(), _own_cgroups()
                found = _probe_v2(mounts, own) or _probe_v1(mounts, own)
            _chosen.append(found or ("rlimits", None))
        return _chosen[0]


class Usage:
    """What one submission used: its peak memory (bytes; 0 where unknown) and which total limit it hit."""

    def __init__(self, peak: int = 0, hit: str | None = None):
        self.peak, self.hit = peak, hit


class Box:
    """The total limits of one sandbox run. ``preexec()`` runs in the child before exec (it joins the cgroup);
    ``watch(pid)`` starts the fallback's watchdog; ``close()`` kills whatever is left and returns the Usage."""

    def __init__(self, memory: int | None = None, tasks: int | None = None):
        self.kind, where = _choice()
        memory, tasks = memory or MEMORY_TOTAL, tasks or MAX_TASKS
        self.memory, self.tasks = memory, tasks
        self.dirs: list[Path] = []
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None
        self._fallback_peak = 0
        self._fallback_hit: str | None = None
        with _lock:
            _counter[0] += 1
            name = f"grade-{os.getpid()}-{_counter[0]}"
        if self.kind == "cgroup2":
            d = where / name
            d.mkdir()
            self.dirs = [d]
            _write(d / "memory.max", str(memory))
            if (d / "memory.swap.max").exists():
                _write(d / "memory.swap.max", "0")
            _write(d / "pids.max", str(tasks))
            if (d / "memory.oom.group").exists():  # the OOM killer ends the whole submission, not one process
                _write(d / "memory.oom.group", "1")
            self._procs = [str(d / "cgroup.procs")]
        elif self.kind == "cgroup1":
            mem, pids = where["memory"] / name, where["pids"] / name
            mem.mkdir()
            pids.mkdir()
            self.dirs = [mem, pids]
            _write(mem / "memory.limit_in_bytes", str(memory))
            if (mem / "memory.memsw.limit_in_bytes").exists():
                try:
                    _write(mem / "memory.memsw.limit_in_bytes", str(memory))
                except OSError:
                    pass
            _write(pids / "pids.max", str(tasks))
            self._procs = [str(mem / "cgroup.procs"), str(pids / "cgroup.procs")]
        else:
            self._procs = []

    # ---------------------------------------------------------------------------------------- in the child
    def preexec(self):
        """Join the cgroup (child side, between fork and exec: only writes, no locks)."""
        pid = str(os.getpid()).encode()
        for procs in self._procs:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    # ---------------------------------------------------------------------------------------- in the parent
    def enter(self, pid: int):
        """Put the process ``pid`` (not yet running the submission) in the cgroup: a fork server's child."""
        for procs in self._procs:
            _write(Path(procs), str(pid))

    def watch(self, pid: int):
        if self.kind == "rlimits" and os.path.isdir("/proc"):  # no /proc (macOS): the rlimits alone
            watchdog = threading.Thread(target=self._watch, args=(pid,), daemon=True)
            watchdog.start()
            self._watchdog = watchdog

    def _watch(self, pid: int):
        while not self._stop.wait(SAMPLE_SECONDS):
            used = tree_memory(pid)
            self._fallback_peak = max(self._fallback_peak, used)
            if used > self.memory:
                self._fallback_hit = "memory"
                kill_tree(pid)
                return

    def close(self) -> Usage:
        """Kill every process left in the submission's cgroup, read its peak and remove it."""
        self._stop.set()
        if self._watchdog is not None:
            self._watchdog.join(timeout=5)
        if self.kind == "rlimits":
            return Usage(self._fallback_peak, self._fallback_hit)
        peak, hit = 0, None
        try:
            if self.kind == "cgroup2":
                d = self.dirs[0]
                peak = _int((d / "memory.peak").read_text()) if (d / "memory.peak").exists() else 0
                events = _events(d / "memory.events")
                if events.get("oom_kill", 0) or events.get("oom", 0) or events.get("max", 0):  # reached its total
                    hit = "memory"
                elif _events(d / "pids.events").get("max", 0):
                    hit = "processes"
            else:
                mem, pids = self.dirs
                peak = _int((mem / "memory.max_usage_in_bytes").read_text())
                oom = _events(mem / "memory.oom_control")
                if oom.get("oom_kill", 0) or _int((mem / "memory.failcnt").read_text()):  # reached its total
                    hit = "memory"
                elif _events(pids / "pids.events").get("max", 0):
                    hit = "processes"
        except OSError:
            pass
        self._kill_all()
        return Usage(peak, hit)

    def _kill_all(self):
        for d in self.dirs:
            for _ in range(100):
                if self.kind == "cgroup2" and (d / "cgroup.kill").exists():
                    try:
                        _write(d / "cgroup.kill", "1")
                    except OSError:
                        pass
                try:
                    left = [int(p) for p in (d / "cgroup.procs").read_text().split()]
                except OSError:
                    left = []
                for p in left:
                    try:
                        os.kill(p, signal.SIGKILL)
                    except OSError:
                        pass
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.02)


def _int(text: str) -> int:
    try:
        return int(text.strip().split()[0])
    except (ValueError, IndexError):
        return 0


def _events(path: Path) -> dict:
    try:
        return {k: _int(v) for k, _, v in (line.partition(" ") for line in path.read_text().splitlines())}
    except OSError:
        return {}


# ------------------------------------------------------------------------------------------------------
# the fallback's view of a process tree (/proc)


def descendants(root: int) -> list[int]:
    """``root`` and every process below it (by parent pid), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def tree_memory(root: int) -> int:
    """Bytes held by ``root``'s process tree: proportional resident memory, plus memfd and /dev/shm files it holds open
    (counted once each, even when mapped: an overestimate errs on the host's side)."""
    total, seen = 0, set()
    for pid in descendants(root):
        try:
            total += _proportional(pid)
            fds = os.listdir(f"/proc/{pid}/fd")
        except (OSError, ValueError, IndexError):
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if not (target.startswith("/memfd:") or target.startswith("/dev/shm/")):
                    continue
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def _proportional(pid: int) -> int:
    """A process's proportional set size (pages shared after fork() counted once over the sharers), in bytes;
    its resident size where smaps_rollup is missing."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) << 10
    except OSError:
        pass
    with open(f"/proc/{pid}/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds (user and system) that ``root``'s process tree has used: its live processes' own, and what the
    children they have reaped used. Time spent waiting (for the CPU on a busy machine, for pages the host is slow to
    hand out) is not counted: a time limit on this gives the same verdict however loaded the machine is."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in descendants(root):
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return total / ticks


def kill_tree(root: int):
    for pid in reversed(descendants(root)):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
