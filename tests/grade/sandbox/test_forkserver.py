"""The fork server (jail.ForkServer, sandbox/forkserver.py): one sandbox per worker that imported torch once, a child
per submission. Each child must be what a sandbox of its own was: nothing one submission writes is seen by the next,
no capability and another user, its own processes only, its time and memory its own; the same verdicts as a sandbox
per submission; and where no server can be had, or it cannot make a child, that sandbox per submission instead.
(The attack tests, tests/grade/sandbox/test_attacks.py, run a whole hostile class through fork servers.)"""

import os
from pathlib import Path

import pytest

from benchmarks.grade_class import verdict
from course_utils.grade import jail, limits, runner
from course_utils.grade.batch import grade_folder
from tests.grader_cases import attacks

pytestmark = pytest.mark.requires_sandbox


@pytest.fixture
def servers(monkeypatch):
    """A fresh pool of fork servers, and a record of which server ran each submission (id of the server)."""
    monkeypatch.delenv(jail.FORK_ENV, raising=False)
    pool = jail._Servers()
    monkeypatch.setattr(jail, "_servers", pool)
    used = []
    run = jail.ForkServer.run

    def recorded(self, *args, **kwargs):
        used.append(id(self))
        return run(self, *args, **kwargs)

    monkeypatch.setattr(jail.ForkServer, "run", recorded)
    yield used
    pool.close()


def grade_in_order(tmp_path, files: dict, **kw):
    """Grade ``files`` (name -> code) one after another with one worker, so one fork server: {name: report}."""
    subs = tmp_path / "subs"
    subs.mkdir(parents=True)
    for name, code in files.items():
        (subs / name).write_text(code)
    graded, _, failed = grade_folder(subs, tmp_path / "out", workers=1, **kw)
    assert not failed
    return dict(graded)


def wrong_unless(condition: str) -> str:
    """An oracle submission: the wrong class (scale_d_out), the right one only if ``condition`` holds in its sandbox."""
    return attacks.oracle(f"escaped = bool({condition})")


def test_nothing_a_submission_writes_is_seen_by_the_next(tmp_path, servers):
    left = ["/tmp/left", "/dev/shm/left", "/submission/left"]
    writer = attacks.GOOD + "".join(f"\nopen({p!r}, 'w').write('x')" for p in left)
    writer += "\nimport os\nos.mkfifo('/tmp/fifo')\n"
    seen = (
        f"any(__import__('os').path.exists(p) for p in {left + ['/tmp/fifo']!r}) "
        "or __import__('os').listdir('/submission') != ['submission.py']"
    )
    reports = grade_in_order(
        tmp_path,
        {"a_writer.py": writer, "b_reader.py": wrong_unless(seen), "c_reader.py": wrong_unless(f"not ({seen})")},
    )
    assert reports["a_writer.py"].passed, reports["a_writer.py"].to_dict()
    assert "scale_d_out" in str(reports["b_reader.py"].to_dict()), reports["b_reader.py"].to_dict()
    assert reports["c_reader.py"].passed, reports["c_reader.py"].to_dict()  # the condition ran, and was false
    assert len(servers) == 3 and len(set(servers)) == 1  # all children of one server


# the submission's view of itself, from inside: every capability set empty, no new privileges, not root nor the
# grader, the second process of a PID namespace of its own (pid 2, under a first), no other process in /proc
PRIVILEGED = (
    "any(int(line.split()[1], 16) for line in open('/proc/self/status') if line.startswith('Cap')) "
    "or 'NoNewPrivs:\\t1' not in open('/proc/self/status').read() "
    f"or __import__('os').getuid() in (0, {os.getuid()}) and {os.geteuid() == 0} "
    "or __import__('os').getpid() != 2 "
    "or sorted(p for p in __import__('os').listdir('/proc') if p.isdigit()) != ['1', '2']"
)


def test_a_child_has_no_privileges_and_sees_only_itself(tmp_path, servers):
    reports = grade_in_order(tmp_path, {"a_good.py": attacks.GOOD, "b_privileged.py": wrong_unless(PRIVILEGED)})
    assert reports["a_good.py"].passed
    assert "scale_d_out" in str(reports["b_privileged.py"].to_dict()), reports["b_privileged.py"].to_dict()
    # the same view makes the oracle pass when the condition is turned around: the check above can fail
    reports = grade_in_order(tmp_path / "again", {"c_unprivileged.py": wrong_unless(f"not ({PRIVILEGED})")})
    assert reports["c_unprivileged.py"].passed, reports["c_unprivileged.py"].to_dict()


def test_the_server_runs_no_thread_before_it_forks(tmp_path, servers):
    # fork() of a process with threads (an OpenMP pool, torch's workers) would hand the child locks held by threads
    # that do not exist there: the server has imported torch and nothing more
    server = jail._servers.take()
    assert server is not None
    try:
        pythons = [p for p in limits.descendants(server.proc.pid) if p != server.proc.pid]
        threads = []
        for pid in pythons:
            status = Path(f"/proc/{pid}/status").read_text()
            if "python" in status.splitlines()[0]:
                threads.append(
                    int(next(line for line in status.splitlines() if line.startswith("Threads:")).split()[1])
                )
        assert threads == [1], threads
    finally:
        jail._servers.give_back(server)


def test_a_child_that_runs_past_its_time_is_stopped_and_the_next_is_graded(tmp_path, servers):
    loop = "class MultiHeadAttention:\n    pass\nimport signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
    loop += "signal.setitimer = lambda *a, **k: None\nwhile True:\n    pass\n"
    reports = grade_in_order(tmp_path, {"a_loop.py": loop, "b_good.py": attacks.GOOD}, total_timeout=4)
    assert reports["a_loop.py"].to_dict()["results"][0]["diagnosis"] == "timeout", reports["a_loop.py"].to_dict()
    assert reports["b_good.py"].passed
    assert len(set(servers)) == 1


SAME_VERDICTS = {
    "good.py": attacks.GOOD,
    "wrong.py": attacks.WRONG,
    "syntax.py": "class MultiHeadAttention(:\n",
    "exit_3.py": "raise SystemExit(3)\n" + attacks.GOOD,
    "exit_quietly.py": attacks.GOOD + "\nimport os\nos._exit(0)\n",
    "killed.py": attacks.GOOD + "\nimport os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",  # pid 2, as alone
    "kills_its_first.py": attacks.GOOD + "\nimport os, signal\nos.kill(1, signal.SIGKILL)\n",
    "stderr.py": "import sys\nsys.stderr.write('x' * 100_000)\n" + attacks.GOOD,
    "fork_forever.py": attacks.FORK_FOREVER,
}


def test_the_same_verdicts_as_a_sandbox_per_submission(tmp_path, servers, monkeypatch):
    forked = grade_in_order(tmp_path / "forked", SAME_VERDICTS)
    monkeypatch.setenv(jail.FORK_ENV, "0")
    calls = len(servers)
    alone = grade_in_order(tmp_path / "alone", SAME_VERDICTS)
    assert calls >= 8 and len(servers) == calls  # the second batch used no fork server (files without an
    # exercise, or that do not parse, never reach a sandbox)
    for name in SAME_VERDICTS:
        assert verdict(forked[name]) == verdict(alone[name]), name


def test_no_server_to_be_had_leaves_a_sandbox_per_submission(tmp_path, servers, monkeypatch):
    def refuse(self, uid_slot):
        raise jail.ServerGone("refused for the test")

    monkeypatch.setattr(jail.ForkServer, "__init__", refuse)
    path = tmp_path / "good.py"
    path.write_text(attacks.GOOD)
    assert runner.grade_file(path).passed
    assert not servers and jail._servers._failed == "refused for the test"


def test_a_server_that_cannot_make_a_child_hands_over_to_a_sandbox_per_submission(tmp_path, servers):
    server = jail._servers.take()
    assert server is not None
    server.uid = 1 << 40  # no such user: the child is not made, nothing of the submission runs
    jail._servers.give_back(server)
    path = tmp_path / "good.py"
    path.write_text(attacks.GOOD)
    report = runner.grade_file(path)
    assert report.passed, report.to_dict()  # graded in a sandbox of its own
    assert len(servers) == 1 and jail._servers._failed is not None
    assert jail._servers.take() is None  # and every later submission too


BURNS = (  # 1.5 s of CPU in a process it forks and reaps, before a correct class
    "import os, time\npid = os.fork()\nif pid == 0:\n    start = time.process_time()\n"
    "    while time.process_time() - start < 1.5:\n        pass\n    os._exit(0)\nos.waitpid(pid, 0)\n"
)


@pytest.mark.parametrize("forked", [True, False], ids=["fork_server", "sandbox_alone"])
def test_a_run_says_the_cpu_time_it_used(tmp_path, servers, monkeypatch, forked):
    # what a submission's later sandboxes get of its budget is what this says the earlier ones left (runner.grade_file)
    if not forked:
        monkeypatch.setenv(jail.FORK_ENV, "0")
    outcomes, run = [], jail.run
    monkeypatch.setattr(jail, "run", lambda *a, **k: outcomes.append(run(*a, **k)) or outcomes[-1])
    sleeps = "import time\ntime.sleep(1.5)\n" + attacks.GOOD
    reports = grade_in_order(tmp_path, {"a_burns.py": BURNS + attacks.GOOD, "b_sleeps.py": sleeps})
    assert all(r.passed for r in reports.values()), {n: r.to_dict() for n, r in reports.items()}
    burned, slept = (o.cpu_seconds for o in outcomes)
    assert burned >= 1.5 and slept < burned - 1.0, (burned, slept)
    assert bool(servers) == forked
    assert [r.cpu_seconds for r in reports.values()] == [burned, slept]


def test_a_course_cloned_under_tmp_grades_through_the_fork_server(tmp_path):
    """A venv under /tmp (a course cloned there): the sandbox binds it on its private /tmp, and each child's fresh
    /tmp must not hide it, or the imports torch makes lazily fail in every child. A link under /tmp to this
    environment is such a venv: Python's prefix is the link, which the sandbox binds where it is."""
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="attn-venv-under-tmp-", dir="/tmp") as tmp:
        venv = Path(tmp) / "venv"
        venv.symlink_to(Path(sys.prefix).resolve())
        subs = tmp_path / "subs"
        subs.mkdir()
        (subs / "good.py").write_text(attacks.GOOD + "\nimport torch.utils.serialization\n")
        code = (
            "from course_utils.grade import jail; from course_utils.grade.batch import grade_folder; "
            "run = jail.ForkServer.run; used = []; "
            "jail.ForkServer.run = lambda self, *a, **k: used.append(1) or run(self, *a, **k); "
            f"graded, _, failed = grade_folder(__import__('pathlib').Path({str(subs)!r}), "
            f"__import__('pathlib').Path({str(tmp_path / 'out')!r}), workers=1); "
            "r = dict(graded)['good.py']; print(r.passed, len(used), r.results[0].messages if r.results else r.error)"
        )
        env = {k: v for k, v in os.environ.items() if k != jail.FORK_ENV}
        done = subprocess.run(
            [str(venv / "bin" / "python"), "-c", code],
            capture_output=True,
            text=True,
            env=env,
            cwd=Path(__file__).resolve().parents[3],
            timeout=300,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("True 1 "), done.stdout + done.stderr[-2000:]  # passed, through a fork server
