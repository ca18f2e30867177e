"""The workshop hub's configuration fails closed (`make test-hub`): jupyterhub_config.py, loaded by the installed hub's
own Python as JupyterHub loads it, refuses every setting that would leave the hub open, and settles the safe ones.

Runs only with RUN_HUB_TESTS=1 and HUB_DIR (the hub `make test-hub` installs); skipped otherwise, saying why.
"""

import json
import subprocess

from installed import PREFIX, PYTHON, need_installed_hub

CONFIG = PREFIX / "hub" / "jupyterhub_config.py"
need_installed_hub("the hub's configuration tests", CONFIG)

# load the file as JupyterHub does (traitlets' loader), with the command line given, and print what it settled
LOAD = """
import json, os, sys
from traitlets.config.loader import PyFileConfigLoader
path, argv = sys.argv[1], sys.argv[2:]
sys.argv = ["jupyterhub", *argv]
config = PyFileConfigLoader(os.path.basename(path), path=os.path.dirname(path)).load_config()
hub, auth = config.JupyterHub, config.Authenticator
print(json.dumps({
    "bind_url": hub.bind_url,
    "authenticator": hub.authenticator_class,
    "db_url": hub.db_url,
    "cookie_secret_file": hub.cookie_secret_file,
    "allowed": sorted(auth.allowed_users),
    "admins": sorted(auth.admin_users),
    "allow_all": auth.allow_all,
    "env_keep": list(config.Spawner.env_keep),
}))
"""


def _load(tmp_path, argv=(), **env) -> subprocess.CompletedProcess:
    base = {"PATH": "/usr/bin:/bin", "ATTN_HUB_STATE": str(tmp_path / "state"), "ATTN_LEARNERS": "ann,ben"}
    lib = PREFIX / "python" / "lib"
    if lib.is_dir():
        base["LD_LIBRARY_PATH"] = str(lib)
    return subprocess.run(
        [str(PYTHON), "-c", LOAD, str(CONFIG), *argv],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _settled(proc) -> dict:
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _refused(proc, why: str):
    assert proc.returncode != 0, f"the hub would start: {proc.stdout}"
    assert "refuses to start the hub" in proc.stderr and why in proc.stderr, proc.stderr[-2000:]


def test_the_defaults_are_pam_on_loopback_with_state_outside_the_repository(tmp_path):
    got = _settled(_load(tmp_path, ATTN_INSTRUCTORS="tess"))
    assert got["authenticator"] == "pam" and got["bind_url"] == "http://127.0.0.1:8000"
    state = tmp_path / "state"
    assert got["db_url"] == f"sqlite:///{state / 'jupyterhub.sqlite'}"
    assert got["cookie_secret_file"] == str(state / "jupyterhub_cookie_secret")
    assert state.stat().st_mode & 0o777 == 0o700
    assert got["allowed"] == ["ann", "ben", "tess"] and got["admins"] == ["tess"] and got["allow_all"] is False
    assert "PYTHONPATH" not in got["env_keep"]


def test_it_refuses_what_would_leave_the_hub_open(tmp_path):
    _refused(_load(tmp_path, ATTN_LEARNERS=""), "say who may log in")
    _refused(_load(tmp_path, ATTN_HUB_URL="http://0.0.0.0:8000"), "not loopback")
    _refused(
        _load(tmp_path, argv=["--SharedPasswordAuthenticator.user_password=hunter2hunter2hunter2"]), "command line"
    )
    _refused(_load(tmp_path, argv=["--JupyterHub.authenticator_class=dummy"]), "command line")
    _refused(_load(tmp_path, ATTN_AUTH="dummy"), "choose pam or shared-password")
    _refused(_load(tmp_path, ATTN_EXCHANGE_QUOTA_MIB="lots"), "a whole number of MiB")
    _refused(_load(tmp_path, ATTN_AUTH="shared-password"), "shorter than 16")
    _refused(_load(tmp_path, ATTN_AUTH="shared-password", ATTN_SHARED_PASSWORD="short"), "shorter than 16")
    same = "correct-horse-battery-staple"
    _refused(
        _load(
            tmp_path,
            ATTN_AUTH="shared-password",
            ATTN_INSTRUCTORS="tess",
            ATTN_SHARED_PASSWORD=same,
            ATTN_ADMIN_PASSWORD=same,
        ),
        "not the learners' password",
    )
    secret = tmp_path / "password"
    secret.write_text(same)
    secret.chmod(0o644)
    _refused(_load(tmp_path, ATTN_AUTH="shared-password", ATTN_SHARED_PASSWORD_FILE=str(secret)), "chmod 600")


def test_a_shared_password_from_a_private_file_and_tls_on_a_public_address(tmp_path):
    secret = tmp_path / "password"
    secret.write_text("correct-horse-battery-staple\n")
    secret.chmod(0o600)
    got = _settled(
        _load(
            tmp_path,
            ATTN_AUTH="shared-password",
            ATTN_SHARED_PASSWORD_FILE=str(secret),
            ATTN_HUB_URL="http://0.0.0.0:443",
            ATTN_SSL_CERT="/etc/hub.crt",
            ATTN_SSL_KEY="/etc/hub.key",
        )
    )
    assert got["authenticator"] == "shared-password" and got["bind_url"] == "https://0.0.0.0:443"
