"""Zero to JupyterHub's values (instructors/jupyterhub/z2jh-values.yaml), read against the one-machine hub that
`make test-hub` runs: an authenticator that fails closed, the same exchange service (no volume every pod shares),
the same scopes, and the course in each learner's home with its landing page. No Kubernetes here: what the chart
does with these values is read, not run. Also the image's source (install.py --image-source): no solutions."""

import ast
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
HUB = ROOT / "instructors" / "jupyterhub"
VALUES = yaml.safe_load((HUB / "z2jh-values.yaml").read_text())
CHOICES = ("generic-oauth", "github", "google", "azuread", "gitlab", "cilogon", "ldapauthenticator.LDAPAuthenticator")


def _config_list(name: str) -> list:
    """A list assigned at the top level of jupyterhub_config.py (the one-machine hub's)."""
    tree = ast.parse((HUB / "jupyterhub_config.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{name} not in jupyterhub_config.py")


def test_an_authenticator_is_chosen_and_fails_closed():
    config = VALUES["hub"]["config"]
    chosen = config["JupyterHub"]["authenticator_class"]
    assert chosen in CHOICES and chosen not in ("dummy", "null")
    text = (HUB / "z2jh-values.yaml").read_text()
    assert all(choice in text for choice in CHOICES[1:]), "the choices are named for the instructor"
    assert config["Authenticator"]["allow_all"] is False and config["Authenticator"]["admin_users"]
    oauth = config["GenericOAuthenticator"]
    assert oauth["allowed_groups"] and oauth["admin_groups"]


def test_the_exchange_is_the_hub_service_not_a_shared_volume():
    hub, single = VALUES["hub"], VALUES["singleuser"]
    service = hub["services"]["exchange"]
    assert service["command"][-1] == hub["extraFiles"]["exchange"]["mountPath"]
    assert service["command"][-1].endswith("exchange_service.py")
    assert service["environment"]["ATTN_EXCHANGE_STORE"].startswith("/srv/jupyterhub/")  # the hub's own volume
    # that volume holds a class's submissions: each learner's quota times a large class fits in it
    quota_mib, storage = int(service["environment"]["ATTN_EXCHANGE_QUOTA_MIB"]), hub["db"]["pvc"]["storage"]
    assert storage.endswith("Gi") and int(storage[:-2]) * 1024 >= 300 * quota_mib, (storage, quota_mib)
    port = int(service["url"].rsplit(":", 1)[1])
    assert single["extraEnv"]["ATTN_EXCHANGE_URL"] == f"{service['url']}/services/exchange/"
    assert {p["port"] for p in hub["service"]["extraPorts"]} == {port}
    assert [p["port"] for rule in hub["networkPolicy"]["ingress"] for p in rule["ports"]] == [port]
    assert [p["port"] for rule in single["networkPolicy"]["egress"] for p in rule["ports"]] == [port]
    assert "extraVolumes" not in single.get("storage", {}), "no exchange volume every pod can read and write"
    # the scopes the one-machine hub grants, which make test-hub checks
    scope = "access:services!service=exchange"
    assert scope in hub["loadRoles"]["user"]["scopes"]
    assert hub["config"]["KubeSpawner"]["server_token_scopes"] == _server_token_scopes()


def _server_token_scopes() -> list:
    tree = ast.parse((HUB / "jupyterhub_config.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "c.Spawner.server_token_scopes":
            return ast.literal_eval(node.value)
    raise AssertionError("c.Spawner.server_token_scopes not in jupyterhub_config.py")


def test_the_course_reaches_each_learners_home_and_the_landing_page_is_there():
    single = VALUES["singleuser"]
    command = " ".join(single["lifecycleHooks"]["postStart"]["exec"]["command"])
    build = re.search(r"--target-repo-dir (\S+)", (HUB / "z2jh-values.yaml").read_text()).group(1)
    copied = set(re.findall(rf"{re.escape(build)}/(\S+)", command))
    assert copied == set(_config_list("LEARNER_MATERIAL")), "the same learner material as on one machine"
    assert 'test -e "$HOME/attention-by-hand" ||' in command  # never over a learner's work
    landing = single["defaultUrl"].removeprefix("/lab/tree/")
    assert landing == "attention-by-hand/notebooks/README.md" and (ROOT / "notebooks" / "README.md").exists()


def test_the_image_source_holds_the_course_and_no_solution(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("hub_install", HUB / "install.py")
    install = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(install)
    source = install.image_source(tmp_path / "image")
    assert (source / "notebooks" / "README.md").exists() and (source / "binder" / "postBuild").exists()
    assert not (source / "solutions").exists() and not (source / "tests").exists()
    assert not (source / "instructors").exists() and not (source / ".git").exists()
    for path in source.rglob("*.ipynb"):
        assert "### BEGIN SOLUTION" not in path.read_text(encoding="utf-8"), path
    assert (source / "binder" / "requirements.txt").read_text().splitlines()[-1] == "nbgrader"
    for name in ("nbgrader_config.py", "attn_exchange.py"):  # binder/postBuild installs etc/jupyter
        assert (source / "etc" / "jupyter" / name).read_text() == (HUB / name).read_text()
