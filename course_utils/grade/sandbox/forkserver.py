"""The fork server: one sandboxed process per grading worker that has imported torch and the harness (no thread
pool started, no op run) and forks one child per submission, so that a grading no longer pays for starting Python
and importing torch (most of its time).

Each child is made as the sandbox made each submission's process before: its own mount namespace with its own
private, size-limited /tmp, /dev/shm and /submission (holding only its copy of the submission: nothing a submission
writes is seen by the next), its own PID namespace with its own /proc and a first process that reaps and ends it
(the submission is its second, as in a sandbox of its own; its descendants die with it), its own IPC namespace, the
limits of a sandbox (address space, file size, open files, processes), a new session, and then no capabilities, no
new privileges and an unprivileged user, before the harness reads the plan. The network stays unshared, as the whole
sandbox's. The parent (jail.py) puts each child in its submission's cgroup before it lets it go on, times it and
kills it; this process never reads a plan or a result: their pipes are handed to the child.

    python -c "import sys; sys.path[0] = '/grader'; from sandbox.forkserver import main; main(SOCKET_FD)"

The socket (SOCK_SEQPACKET) carries, per submission: a request (JSON: the submission's file name, the user, the
limits) with six descriptors (plan, result, stderr, submission, go, ready); the answer ``{"pid": ...}``, sent by the
child itself with its credentials (which the kernel translates into the parent's PID namespace), then
``{"status": ..., "cpu": ...}`` from the server when it ended (the exit code, or 128 + the signal; the CPU seconds
wait4 counted for the child and every process of it that was reaped). The child says ``ready`` once
it is made, so that a child the server failed to make is told from a submission that failed.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import resource
import signal
import socket
import stat
import struct
import sys

from . import harness  # torch and this package, imported once here: what every child starts with

_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID = 0x00020000, 0x08000000, 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x8, 0x4000, 0x40000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
MS_RDONLY, MS_REMOUNT, MS_BIND = 0x1, 0x20, 0x1000
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_CAP_VERSION_3 = 0x20080522
FDS = 6  # plan, result, stderr, submission, go, ready
SET_UP = b"ready"  # said on the ready pipe once the child is made, just before the harness runs
RESULT_FD = 3  # where the harness writes its result


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def _mounts_below(target: str) -> list[str]:
    """The mount points strictly below ``target`` in this namespace, parents first (mountinfo's fifth field, with
    its octal escapes undone)."""
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8") as info:
        for line in info:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
            if point.startswith(target.rstrip("/") + "/"):
                points.append(point)
    return sorted(set(points), key=lambda p: p.count("/"))


def _private_trees(size: int) -> None:
    """This child's own /tmp, /dev/shm and /submission (the mounts of the sandbox's namespace are left as they are).

    What the sandbox bound read-only below its /tmp (a Python or a venv that lives under /tmp: a course cloned
    there) is bound again on top of the child's new /tmp, read-only: a fresh tmpfs would otherwise hide it, and the
    imports torch makes lazily (``torch.utils.serialization``) would fail in every child."""
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWPID), "unshare")
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    kept = [(point, os.open(point, os.O_PATH | os.O_CLOEXEC)) for point in _mounts_below("/tmp")]
    for target, mode in (("/tmp", "1777"), ("/dev/shm", "1777"), ("/submission", "0777")):
        _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode={mode}")
    for point, fd in kept:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            os.makedirs(point, mode=0o755, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(point), mode=0o755, exist_ok=True)
            os.close(os.open(point, os.O_WRONLY | os.O_CREAT, 0o644))
        _mount(f"/proc/self/fd/{fd}", point, None, MS_BIND)
        _mount("none", point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
        os.close(fd)


def _copy_submission(fd: int, name: str, uid: int) -> None:
    path = os.path.join("/submission", name)
    out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        while chunk := os.read(fd, 1 << 16):
            os.write(out, chunk)
    finally:
        os.close(out)
        os.close(fd)
    os.chown(path, uid, uid)


def _drop_privileges(uid: int) -> None:
    """No capability left in any set, no new privileges, the unprivileged user (as setpriv did for the sandbox; where
    the grader is not root, the sandbox's user namespace maps only the grader's user, who stays)."""
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:  # EINVAL: past the last
            break
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    try:
        os.setgroups([])
    except PermissionError:  # a user namespace (the grader is not root) denies it: the user stays the grader's
        if uid != os.getuid():
            raise
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # clears the permitted and effective sets
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: zero, twice (64 bits)
    _check(_libc.capset(header, data), "capset")  # the inheritable set too
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    # the change of user made it undumpable, which hands its /proc/self to root; an exec (setpriv's) would have
    # made it dumpable again: its own files, e.g. /proc/self/comm, are its own, as in a sandbox of its own
    _check(_libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "dumpable")


def _limits(request: dict) -> None:
    for name, value in request["rlimits"].items():
        limit = getattr(resource, name)
        resource.setrlimit(limit, (value, value))


def _exit_code(status: int) -> int:
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def _fork_into(step, request: dict, fds: list[int]) -> int:
    """Fork a child that runs ``step`` (which never returns): its pid. A step that fails says why on stderr (where
    the parent reads the submission's) and ends its process; nothing of the submission has run then."""
    pid = os.fork()
    if pid == 0:
        try:
            step(request, fds)
        except BaseException as exc:  # noqa: BLE001
            os.write(2, f"fork server: {type(exc).__name__}: {exc}\n".encode())
        os._exit(1)
    return pid


def _namespace_init(request: dict, fds: list[int]) -> None:
    """The first process of the child's PID namespace, as bubblewrap's own is in a sandbox: mounts its /proc, forks
    the submission's process, reaps what is orphaned to it, and ends with the submission's exit code, taking every
    process of the namespace with it. Never returns."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # its keeper killed (timeout): this namespace ends
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for name in ("sys", "sysrq-trigger", "irq", "bus"):  # read-only, as bubblewrap leaves them
        path = "/proc/" + name
        if os.path.exists(path):
            _mount(path, path, None, MS_BIND | MS_REC)
            _mount("none", path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    pid = _fork_into(_submission_process, request, fds)
    os.closerange(3, 1 << 16)
    while True:
        try:
            done, status = os.wait()
        except ChildProcessError:
            os._exit(1)
        if done == pid:
            os._exit(_exit_code(status))


def _submission_process(request: dict, fds: list[int]) -> None:
    """The submission's process (the second of its namespace): its file, the user and limits, then the harness.
    Never returns."""
    plan, result, stderr, submission, _go, ready = fds
    uid = int(request["uid"])
    _copy_submission(submission, request["name"], uid)
    os.setsid()
    os.dup2(plan, 0)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(stderr, 2)
    os.dup2(result, RESULT_FD)
    os.dup2(ready, RESULT_FD + 1)
    ready = RESULT_FD + 1
    os.closerange(RESULT_FD + 2, 1 << 16)  # the server's socket and every other descriptor
    os.chdir("/submission")
    _limits(request)
    _drop_privileges(uid)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    os.write(ready, SET_UP)  # what fails from here on is the submission's; before, the server's (graded otherwise)
    os.close(ready)
    os.environ.update(request["env"])  # what the plan's kinds add (exercise 14's Triton interpreter)
    sys.argv = ["-c", str(RESULT_FD)]
    harness.main(RESULT_FD)
    os._exit(0)


def _keeper(request: dict, fds: list[int]) -> None:
    """The child the server forks: waits for the parent's go (it is in its cgroup by then), makes its private trees
    and namespaces, forks the submission's process and ends as it ends. Never returns."""
    code = 1
    try:
        os.dup2(fds[2], 2)  # what goes wrong here is said where the parent reads the submission's stderr
        go = fds[4]
        if os.read(go, 1) != b"g":  # the parent closed it: not to be run
            os._exit(1)
        os.close(go)
        _private_trees(int(request["tmp_size"]))
        pid = _fork_into(_namespace_init, request, fds)
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
        _, status = os.waitpid(pid, 0)
        code = _exit_code(status)
    except BaseException as exc:  # noqa: BLE001
        try:
            os.write(2, f"fork server: {type(exc).__name__}: {exc}\n".encode())
        except OSError:
            pass
    os._exit(code)


def serve(sock: socket.socket) -> None:
    sock.send(json.dumps({"ready": os.getpid()}).encode())
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, 1 << 16, FDS)
        except OSError:
            return
        if not message:  # the parent closed the socket: the batch is over
            return
        request = json.loads(message)
        if len(fds) != FDS:
            for fd in fds:
                os.close(fd)
            sock.send(json.dumps({"error": "descriptors missing"}).encode())
            continue
        pid = os.fork()
        if pid == 0:  # the child says its pid itself: the kernel gives the parent its pid on the host with it
            try:
                me = os.getpid()
                creds = struct.pack("3i", me, os.getuid(), os.getgid())
                sock.sendmsg([json.dumps({"pid": me}).encode()], [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, creds)])
            finally:
                sock.close()
            _keeper(request, fds)
        for fd in fds:
            os.close(fd)
        _, status, used = os.wait4(pid, 0)  # one submission at a time: the next is forked after this one ended
        sock.send(json.dumps({"status": _exit_code(status), "cpu": used.ru_utime + used.ru_stime}).encode())


def main(sock_fd: int) -> None:
    """The server's life: serve the parent on the socket ``sock_fd`` until it closes it (see jail.ForkServer)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve(socket.socket(fileno=sock_fd))
