"""The exchange service on its own (`make test-hub`), run by the installed hub's Python with a stand-in for the hub's
token check: what `make test-hub`'s one-machine hub cannot produce, because its users are Unix accounts. A user name
from an OAuth provider may hold a '+' (a tagged e-mail address): filed as "bob+x+workshop+...", its submissions would
show in bob's view, whose own are "bob+...". The service refuses such a name.

Runs only with RUN_HUB_TESTS=1 and HUB_DIR (the hub `make test-hub` installs); skipped otherwise, saying why.
"""

import json
import subprocess

from installed import PREFIX, PYTHON, need_installed_hub

SERVICE = PREFIX / "hub" / "exchange_service.py"
need_installed_hub("the exchange service's tests", SERVICE)

# the service, its hub token check replaced by a table of tokens; each request's (status, answer) printed as JSON
SCRIPT = """
import asyncio, base64, datetime, json, sys
sys.path.insert(0, sys.argv[1])
import exchange_service
from tornado.httpclient import AsyncHTTPClient
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

SCOPE = "access:services!service=exchange"
USERS = {t: {"kind": "user", "name": n, "scopes": [SCOPE]} for t, n in
         [("t-teacher", "teacher"), ("t-bob", "bob"), ("t-tagged", "bob+x"), ("t-space", "bob x")]}


class Tokens:
    access_scopes = {SCOPE}

    def get_token(self, handler, in_cookie=False):
        return handler.request.headers.get("Authorization", "").removeprefix("token ") or None

    async def user_for_token(self, token, sync=False):
        return USERS.get(token)


async def main(store):
    exchange_service.HubAuth = Tokens
    app = exchange_service.make_app(store, {"teacher"}, "/services/exchange/")
    (sock,) = bind_sockets(0, "127.0.0.1")[:1]
    HTTPServer(app).add_sockets([sock])
    base = f"http://127.0.0.1:{sock.getsockname()[1]}/services/exchange/api/course/"
    client, answers = AsyncHTTPClient(), []

    async def call(method, path, token, body=None):
        response = await client.fetch(base + path, method=method, raise_error=False,
                                      headers={"Authorization": "token " + token},
                                      body=None if body is None else json.dumps(body))
        answers.append([method, path, token, response.code, json.loads(response.body or b"{}")])

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f %Z")
    files = [{"path": "timestamp.txt", "content": base64.b64encode(stamp.encode()).decode()}]
    await call("PUT", "outbound/hw", "t-teacher", {"files": files})
    await call("POST", "inbound/hw", "t-bob", {"files": files})
    for token in ("t-tagged", "t-space"):
        await call("GET", "view", token)
        await call("POST", "inbound/hw", token, {"files": files})
    await call("GET", "view", "t-bob")
    print(json.dumps(answers))


asyncio.run(main(__import__("pathlib").Path(sys.argv[2])))
"""


def test_a_user_name_that_nbgrader_cannot_file_is_refused(tmp_path):
    proc = subprocess.run(
        [str(PYTHON), "-c", SCRIPT, str(SERVICE.parent), str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    answers = {(m, p, t): (code, body) for m, p, t, code, body in json.loads(proc.stdout)}
    assert answers[("POST", "inbound/hw", "t-bob")][0] == 200
    for token in ("t-tagged", "t-space"):
        for request in (("GET", "view", token), ("POST", "inbound/hw", token)):
            code, body = answers[request]
            assert code == 403 and "cannot be filed in nbgrader's exchange" in body["error"], (request, code, body)
    code, view = answers[("GET", "view", "t-bob")]
    assert code == 200 and list(view["inbound"]) and all(n.startswith("bob+hw+") for n in view["inbound"]), view
