"""The workshop hub on one machine. `make hub-setup` (install.py) puts this file in <prefix>/hub, beside the exchange
service and nbgrader's settings, with the environment in <prefix>/env and what learners get in <prefix>/course; as
root on the workshop's server:

    ATTN_INSTRUCTORS=teacher ATTN_LEARNER_GROUP=workshop \
        <prefix>/env/bin/jupyterhub -f <prefix>/hub/jupyterhub_config.py

Every learner is a Unix account of their own: their server runs as that user, their home is made private (0700), and
the hub stops their server when it uses more than its memory. nbgrader's exchange is a hub service that files each
submission under the hub user whose token sent it. What the hub keeps (its database, cookie secret, the exchange)
lives in a state folder only root reads, never in the repository. The settings come from the environment, never
from the command line (which every local account can read in /proc):

    ATTN_AUTH            pam (default: the machine's passwords) or shared-password (one password for the class)
    ATTN_SHARED_PASSWORD_FILE, ATTN_SHARED_PASSWORD   shared-password only: the learners' password (file first)
    ATTN_ADMIN_PASSWORD_FILE, ATTN_ADMIN_PASSWORD     shared-password only: the instructors' own, a different one
    ATTN_LEARNERS        comma-separated accounts who may log in; or ATTN_LEARNER_GROUP, a Unix group (one is needed)
    ATTN_INSTRUCTORS     comma-separated accounts who are instructors (hub admins; nbgrader's release and collect)
    ATTN_HUB_URL         where the hub listens (default http://127.0.0.1:8000, behind a TLS proxy); an address
                         other than loopback needs ATTN_SSL_CERT and ATTN_SSL_KEY (the hub then serves TLS itself)
    ATTN_HUB_STATE       the state folder (default /var/lib/attention-by-hand-hub, mode 0700)
    ATTN_MEM_LIMIT       memory per learner, their server and kernels together (default 2G)
    ATTN_COURSE_ID       nbgrader's course id (default attention-by-hand, as instructors/nbgrader_config.py)
    ATTN_EXCHANGE_PORT   the exchange service's port on 127.0.0.1 (default 8083)
    ATTN_EXCHANGE_QUOTA_MIB  what one learner's submissions to the course may take in the exchange (default 100)

tests/hub/test_workshop.py installs and starts exactly this, with Unix accounts of its own, and attacks it.
"""

import importlib.util
import os
import pwd
import resource
import shutil
import sys
from pathlib import Path
from urllib.parse import urlparse

from jupyterhub.spawner import LocalProcessSpawner

c = get_config()  # noqa: F821 - defined by traitlets when JupyterHub loads this file

HUB = Path(__file__).resolve().parent
PREFIX = HUB.parent
ENV, COURSE = PREFIX / "env", PREFIX / "course"
LEARNER_MATERIAL = ["notebooks", "exercises", "docs", "README.md", "README.zh-CN.md"]
COURSE_FOLDER = "attention-by-hand"  # in each learner's home
STATE = Path(os.environ.get("ATTN_HUB_STATE", "/var/lib/attention-by-hand-hub"))


class Refused(SystemExit):
    """A setting that would leave the hub open: the hub does not start."""

    def __init__(self, why: str):
        super().__init__(f"jupyterhub_config.py refuses to start the hub: {why}")


def _names(variable: str) -> set:
    return {name.strip() for name in os.environ.get(variable, "").split(",") if name.strip()}


def _secret(variable: str) -> str:
    """A secret from ``<variable>_FILE`` (a file only root reads) or ``<variable>``; never from the command line."""
    path = os.environ.get(variable + "_FILE", "")
    if path:
        if os.stat(path).st_mode & 0o077:
            raise Refused(f"{variable}_FILE ({path}) is readable by other accounts: chmod 600 it")
        return Path(path).read_text().strip()
    return os.environ.get(variable, "")


for arg in sys.argv[1:]:  # argv is public (ps, /proc/<pid>/cmdline): no secret and no authenticator from there
    if "password" in arg.lower() or "authenticator_class" in arg.lower():
        raise Refused(f"{arg.split('=')[0]} on the command line: use the ATTN_* environment variables")

# ------------------------------------------------------------------------------------------------ state, address
STATE.mkdir(parents=True, exist_ok=True, mode=0o700)
STATE.chmod(0o700)
c.JupyterHub.db_url = f"sqlite:///{STATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = str(STATE / "proxy.pid")
PROXY = HUB / "proxy" / "node_modules" / ".bin" / "configurable-http-proxy"
if PROXY.exists():
    c.ConfigurableHTTPProxy.command = [str(PROXY)]

url = urlparse(os.environ.get("ATTN_HUB_URL", "http://127.0.0.1:8000"))
cert, key = os.environ.get("ATTN_SSL_CERT", ""), os.environ.get("ATTN_SSL_KEY", "")
if cert and key:
    c.JupyterHub.ssl_cert, c.JupyterHub.ssl_key = cert, key
    url = url._replace(scheme="https")
elif url.hostname not in ("127.0.0.1", "localhost", "::1"):
    raise Refused(f"{url.hostname} is not loopback and no ATTN_SSL_CERT/ATTN_SSL_KEY: passwords would cross in clear")
c.JupyterHub.bind_url = url.geturl()

# ------------------------------------------------------------------------------------------------ who logs in
INSTRUCTORS = _names("ATTN_INSTRUCTORS")
LEARNERS, GROUP = _names("ATTN_LEARNERS"), os.environ.get("ATTN_LEARNER_GROUP", "")
if not (LEARNERS or GROUP):
    raise Refused("say who may log in: ATTN_LEARNERS (accounts) or ATTN_LEARNER_GROUP (a Unix group)")
c.Authenticator.admin_users = INSTRUCTORS
c.Authenticator.allowed_users = LEARNERS | INSTRUCTORS
if GROUP:
    c.LocalAuthenticator.allowed_groups = {GROUP}
c.Authenticator.blocked_users = {"root"}
c.Authenticator.allow_all = False

AUTH = os.environ.get("ATTN_AUTH", "pam")
if AUTH == "pam":
    c.JupyterHub.authenticator_class = "pam"
elif AUTH == "shared-password":
    # anyone who knows the shared password can log in as any allowed learner: a class where that is acceptable only
    password, admin_password = _secret("ATTN_SHARED_PASSWORD"), _secret("ATTN_ADMIN_PASSWORD")
    if len(password) < 16:
        raise Refused("ATTN_SHARED_PASSWORD(_FILE) is missing or shorter than 16 characters")
    if INSTRUCTORS and (len(admin_password) < 16 or admin_password == password):
        raise Refused("instructors need ATTN_ADMIN_PASSWORD(_FILE): 16 characters or more, not the learners' password")
    c.JupyterHub.authenticator_class = "shared-password"
    c.SharedPasswordAuthenticator.user_password = password
    if admin_password:
        c.SharedPasswordAuthenticator.admin_password = admin_password
else:
    raise Refused(f"ATTN_AUTH={AUTH!r}: choose pam or shared-password")

# ------------------------------------------------------------------------------------------------ their servers


def _limits():
    """course_utils' limits (the grader's: a cgroup where the host has one, else a watchdog), loaded from its file so
    that the hub does not import the course (and torch)."""
    spec = importlib.util.spec_from_file_location("attn_limits", COURSE / "course_utils" / "grade" / "limits.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


limits = _limits()
MEMORY = os.environ.get("ATTN_MEM_LIMIT", "2G")
TASKS = 1024  # processes and threads per learner: JupyterLab, a few kernels and their BLAS threads


class LimitedSpawner(LocalProcessSpawner):
    """LocalProcessSpawner (each server as its learner's Unix user), with the learner's memory enforced, which
    LocalProcessSpawner alone ignores: the server and its kernels in a cgroup of their own (memory.max, swap 0), so
    that the kernel's OOM killer acts inside that learner only; where no cgroup can be made, a watchdog that stops
    the learner's server past its total (limits.py says how each works)."""

    box = None

    def make_preexec_fn(self, name):
        become = super().make_preexec_fn(name)
        self.box = box = limits.Box(memory=self.mem_limit, tasks=TASKS)
        ceiling = self.mem_limit * 2  # without a cgroup, no single process may map more than twice the total

        def preexec():
            box.preexec()  # join the cgroup while still root
            if box.kind == "rlimits":
                resource.setrlimit(resource.RLIMIT_AS, (ceiling, ceiling))
            become()

        return preexec

    async def start(self):
        url = await super().start()
        self.box.watch(self.pid)
        self.log.info("%s: memory limit %d MiB by %s", self.user.name, self.mem_limit >> 20, self.box.kind)
        return url

    async def stop(self, now=False):
        try:
            await super().stop(now=now)
        finally:
            if self.box is not None:
                self.box.close()
                self.box = None


EXCHANGE_PORT = int(os.environ.get("ATTN_EXCHANGE_PORT", "8083"))
COURSE_ID = os.environ.get("ATTN_COURSE_ID", "attention-by-hand")
EXCHANGE_QUOTA_MIB = os.environ.get("ATTN_EXCHANGE_QUOTA_MIB", "100")
if not EXCHANGE_QUOTA_MIB.isdigit() or int(EXCHANGE_QUOTA_MIB) < 1:
    raise Refused(f"ATTN_EXCHANGE_QUOTA_MIB={EXCHANGE_QUOTA_MIB!r}: a whole number of MiB, 1 or more")
c.JupyterHub.spawner_class = LimitedSpawner
c.Spawner.mem_limit = MEMORY
c.Spawner.cmd = [str(ENV / "bin" / "jupyterhub-singleuser")]
c.Spawner.default_url = f"/lab/tree/{COURSE_FOLDER}/notebooks/README.md"
c.Spawner.args = ["--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
# nothing of the hub's own environment (a PYTHONPATH, a virtualenv) reaches the learners' servers
c.Spawner.env_keep = ["LANG", "LC_ALL"]
c.Spawner.environment = {
    "PATH": f"{ENV / 'bin'}:/usr/local/bin:/usr/bin:/bin",
    "ATTN_EXCHANGE_URL": f"http://127.0.0.1:{EXCHANGE_PORT}/services/exchange/",
    "ATTN_COURSE_ID": COURSE_ID,
    # nbgrader reads hub/nbgrader_config.py: the course id and the exchange service
    "JUPYTER_CONFIG_PATH": str(HUB),
    # many learners on few cores: one BLAS thread per kernel
    "OMP_NUM_THREADS": "1",
}
if (PREFIX / "python" / "lib").is_dir():  # install.py --copy-python: the interpreter's library is in the prefix
    c.Spawner.environment["LD_LIBRARY_PATH"] = str(PREFIX / "python" / "lib")
c.Spawner.http_timeout = 60
c.Spawner.start_timeout = 120

# the exchange service, and the right of every server's token to use it
c.JupyterHub.services = [
    {
        "name": "exchange",
        "url": f"http://127.0.0.1:{EXCHANGE_PORT}",
        "command": [str(ENV / "bin" / "python"), str(HUB / "exchange_service.py")],
        "environment": {
            "ATTN_EXCHANGE_STORE": str(STATE / "exchange"),
            "ATTN_INSTRUCTORS": ",".join(sorted(INSTRUCTORS)),
            "ATTN_EXCHANGE_QUOTA_MIB": EXCHANGE_QUOTA_MIB,
            **({"LD_LIBRARY_PATH": str(PREFIX / "python" / "lib")} if (PREFIX / "python" / "lib").is_dir() else {}),
        },
    }
]
c.JupyterHub.load_roles = [{"name": "user", "scopes": ["self", "access:services!service=exchange"]}]
c.Spawner.server_token_scopes = [
    "users:activity!user",
    "access:servers!server",
    "access:services!service=exchange",
]


def give_the_course(spawner):
    """Make the learner's home private and copy the course into it on first login; never overwrite their work."""
    account = pwd.getpwnam(spawner.user.name)
    home = Path(account.pw_dir)
    home.chmod(0o700)  # nobody else reads a learner's notebooks, submissions' cache or feedback
    target = home / COURSE_FOLDER
    if target.exists():
        return
    target.mkdir(parents=True)
    for name in LEARNER_MATERIAL:
        source = COURSE / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
        elif source.exists():
            shutil.copy2(source, target / name)
    for path in [target, *target.rglob("*")]:
        os.chown(path, account.pw_uid, account.pw_gid)


c.Spawner.pre_spawn_hook = give_the_course
