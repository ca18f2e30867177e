"""A workshop on one machine: JupyterHub with the course pre-installed for every learner and nbgrader's exchange
for the exercises. `make hub-setup` installs the hub, its proxy and nbgrader into .venv-nbgrader (the course's own
kernel, .venv, runs the notebooks); then, as root on the workshop's server:

    ATTN_INSTRUCTORS=alice_t .venv-nbgrader/bin/jupyterhub -f instructors/jupyterhub/jupyterhub_config.py

Learners log in with their Unix accounts (PAM) and land on the course's index; each gets a copy of the learner
material (notebooks, exercises, docs) in ~/attention-by-hand on first login. The settings an instructor may change
come from the environment:

    ATTN_HUB_URL       where the hub listens (default http://127.0.0.1:8000: put a TLS proxy in front of it)
    ATTN_INSTRUCTORS   comma-separated hub users who are instructors (hub admins; nbgrader's collect is theirs)
    ATTN_EXCHANGE      nbgrader's exchange folder (default /srv/nbgrader/exchange; every user must reach it)
    ATTN_COURSE_ID     nbgrader's course id (default attention-by-hand, as instructors/nbgrader_config.py)
    ATTN_GIVE_SOLUTIONS=1  copy solutions/ too (self-study workshops; not for graded ones)

The same settings hold on The Littlest JupyterHub (drop this file into /opt/tljh/config/jupyterhub_config.d/) and,
with the image Binder builds from binder/, on Zero to JupyterHub: see instructors/jupyterhub/README.md.
tests/hub/test_workshop.py starts this file for real, with a test authenticator and a local spawner.
"""

import os
import pwd
import shutil
import sys
from pathlib import Path

c = get_config()  # noqa: F821 - defined by traitlets when JupyterHub loads this file

REPO = Path(__file__).resolve().parents[2]
LEARNER_MATERIAL = ["notebooks", "exercises", "docs", "README.md", "README.zh-CN.md"]
COURSE_FOLDER = "attention-by-hand"  # in each learner's home
INSTRUCTORS = {name.strip() for name in os.environ.get("ATTN_INSTRUCTORS", "").split(",") if name.strip()}
EXCHANGE = os.environ.get("ATTN_EXCHANGE", "/srv/nbgrader/exchange")

c.JupyterHub.bind_url = os.environ.get("ATTN_HUB_URL", "http://127.0.0.1:8000")
c.Authenticator.admin_users = INSTRUCTORS
c.Authenticator.allow_all = True  # every account of the machine; list learners with c.Authenticator.allowed_users
c.JupyterHub.spawner_class = "jupyterhub.spawner.LocalProcessSpawner"
# the proxy `make hub-setup` installs beside the hub (npm's configurable-http-proxy), else the one on PATH
PROXY = Path(sys.executable).parents[1] / "proxy" / "node_modules" / ".bin" / "configurable-http-proxy"
if PROXY.exists():
    c.ConfigurableHTTPProxy.command = [str(PROXY)]

# the single-user servers run from the hub's environment (JupyterLab and nbgrader); notebooks run in the course's
# kernel, which `make nbgrader-setup` registers there as python3
c.Spawner.cmd = [str(Path(sys.executable).with_name("jupyterhub-singleuser"))]
c.Spawner.default_url = f"/lab/tree/{COURSE_FOLDER}/notebooks/README.md"
c.Spawner.args = ["--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
c.Spawner.environment = {
    "ATTN_EXCHANGE": EXCHANGE,
    "ATTN_INSTRUCTORS": ",".join(sorted(INSTRUCTORS)),
    "ATTN_COURSE_ID": os.environ.get("ATTN_COURSE_ID", "attention-by-hand"),
    # nbgrader reads instructors/jupyterhub/nbgrader_config.py: the exchange, and a learner's own student id
    "JUPYTER_CONFIG_PATH": str(Path(__file__).resolve().parent),
    # two cores shared by many learners: one BLAS thread per kernel
    "OMP_NUM_THREADS": "1",
}
c.Spawner.mem_limit = os.environ.get("ATTN_MEM_LIMIT", "2G")  # enforced by spawners that can (systemd, Kubernetes)
c.Spawner.http_timeout = 60
c.Spawner.start_timeout = 120


def give_the_course(spawner):
    """Copy the learner material into the learner's home on first login; never overwrite their work."""
    home = Path(getattr(spawner, "home_dir", "") or pwd.getpwnam(spawner.user.name).pw_dir)
    target = home / COURSE_FOLDER
    if target.exists():
        return
    material = LEARNER_MATERIAL + (["solutions"] if os.environ.get("ATTN_GIVE_SOLUTIONS") == "1" else [])
    target.mkdir(parents=True)
    for name in material:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
        elif source.exists():
            shutil.copy2(source, target / name)
    try:
        account = pwd.getpwnam(spawner.user.name)
    except KeyError:  # a test's user without a Unix account: the server runs as the hub's own user
        return
    for path in [target, *target.rglob("*")]:
        os.chown(path, account.pw_uid, account.pw_gid)


c.Spawner.pre_spawn_hook = give_the_course
