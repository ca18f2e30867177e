"""nbgrader's exchange as a JupyterHub service: who submits is who the hub says the request's token belongs to.

nbgrader's own exchange is a folder every learner can write to, and a submission's name says whose it is: a learner
who writes ``bob+workshop+...`` there submits as bob, and where every server runs as one Unix user (Zero to
JupyterHub's pods) every learner can read and replace every other's work. This service keeps the exchange in a folder
only the hub's user can read (``ATTN_EXCHANGE_STORE``, mode 0700) and answers requests that carry a hub token (a
learner's server has one: ``$JUPYTERHUB_API_TOKEN``). The hub names the token's owner; the service files a submission
under that name, whatever the request says, and shows each learner the released assignments, their own submissions and
their own feedback. One learner cannot fill the disk: each keeps the newest ``KEEP`` submissions of an assignment
(nbgrader collects the newest) and at most ``ATTN_EXCHANGE_QUOTA_MIB`` (default 100) in a course; a submission past
that is refused with a message that says so. Instructors (``ATTN_INSTRUCTORS``, the hub's admins) release assignments
and feedback and collect every submission. ``attn_exchange.py`` is nbgrader's side of it.

jupyterhub_config.py starts it as a managed service (the hub gives it its URL and its own token in the
environment). The API, under ``/services/<name>/api/<course>/``, JSON in and out, files as
``[{"path": ..., "content": base64}]``:

    GET    view                           what the caller may see: outbound, inbound, feedback
    POST   inbound/<assignment>           submit (any logged-in user; filed under the token's owner)
    PUT    outbound/<assignment>          release (instructors)
    DELETE outbound/<assignment>          take a release back (instructors)
    PUT    feedback/<learner>             release a learner's feedback (instructors)
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import os
import re
import secrets
import shutil
import sys
from pathlib import Path

from jupyterhub.services.auth import HubAuth, check_scopes
from tornado import ioloop, web
from tornado.httpserver import HTTPServer

MAX_BODY = 32 << 20  # one request: a whole assignment with its notebooks
MAX_FILES = 200  # files in one request
KEEP = 5  # a learner's newest submissions of one assignment kept: nbgrader collects the newest, the rest are history
DEFAULT_QUOTA_MIB = 100  # what one learner's submissions to one course may take in all
NAME = re.compile(r"^[A-Za-z0-9_@-][A-Za-z0-9_.@-]{0,127}$")  # a course, an assignment, a learner: no '/', no '+'
TIMESTAMP_SLACK = datetime.timedelta(minutes=10)  # a submission's own time may differ from the service's by this


def _name(value: str) -> str:
    if not NAME.match(value):
        raise web.HTTPError(400, "not a valid name")
    return value


def _files(body: dict) -> list[tuple[str, bytes]]:
    """The request's files as (relative path, bytes); refuses anything that would leave its folder."""
    items = body.get("files")
    if not isinstance(items, list) or len(items) > MAX_FILES:
        raise web.HTTPError(400, "files: a list of at most %d files" % MAX_FILES)
    out = []
    for item in items:
        path, content = (item.get("path"), item.get("content")) if isinstance(item, dict) else (None, None)
        if not isinstance(path, str) or not isinstance(content, str):
            raise web.HTTPError(400, "each file needs a path and a content")
        parts = path.split("/")
        if path.startswith("/") or any(p in ("", ".", "..") or "\0" in p for p in parts):
            raise web.HTTPError(400, "a file's path must stay inside its folder")
        try:
            out.append((path, base64.b64decode(content, validate=True)))
        except (binascii.Error, ValueError):
            raise web.HTTPError(400, "a file's content is not base64") from None
    return out


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def _read(folder: Path) -> list[dict]:
    return [
        {"path": p.relative_to(folder).as_posix(), "content": base64.b64encode(p.read_bytes()).decode()}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    ]


def _write(folder: Path, files: list[tuple[str, bytes]]) -> None:
    """Write ``files`` into a new ``folder`` atomically (a sibling, then a rename)."""
    partial = folder.with_name(f".{folder.name}.{secrets.token_hex(4)}")
    for path, data in files:
        target = partial / path
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        target.write_bytes(data)
    partial.mkdir(parents=True, exist_ok=True, mode=0o700)
    if folder.exists():
        shutil.rmtree(folder)
    partial.rename(folder)


class Handler(web.RequestHandler):
    def initialize(self, store: Path, hub_auth: HubAuth, instructors: set, quota: int):
        self.store, self.hub_auth, self.instructors, self.quota = store, hub_auth, instructors, quota

    def check_xsrf_cookie(self):  # token-authenticated API: no cookies are accepted
        pass

    async def prepare(self):
        token = self.hub_auth.get_token(self, in_cookie=False)
        model = await self.hub_auth.user_for_token(token, sync=False) if token else None
        if not model or model.get("kind", "user") != "user":
            raise web.HTTPError(403, "a hub user's token is required")
        if not check_scopes(self.hub_auth.access_scopes, set(model.get("scopes", []))):
            raise web.HTTPError(403, "this token may not use the exchange")
        if not NAME.match(model["name"]):  # a '+' would let "bob" see "bob+x"'s submissions, filed as "bob+x+..."
            raise web.HTTPError(403, "this user name cannot be filed in nbgrader's exchange (a '+', '/' or space)")
        self.user = model["name"]
        self.instructor = self.user in self.instructors

    def course(self, course: str) -> Path:
        return self.store / _name(course)

    def body(self) -> dict:
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            raise web.HTTPError(400, "the body is not JSON") from None
        if not isinstance(body, dict):
            raise web.HTTPError(400, "the body is not a JSON object")
        return body

    def need_instructor(self):
        if not self.instructor:
            raise web.HTTPError(403, "only an instructor may do this")

    def reply(self, value: dict):
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(value))

    def write_error(self, status_code: int, **kwargs):
        """A refusal as JSON whose ``error`` says why (tornado's page would give only the status)."""
        exc = kwargs.get("exc_info", (None, None))[1]
        message = exc.log_message if isinstance(exc, web.HTTPError) and exc.log_message else self._reason
        self.reply({"error": message})


class View(Handler):
    def get(self, course):
        """The released assignments, the caller's own submissions (an instructor's: all) and own feedback."""
        root = self.course(course)
        outbound = {p.name: _read(p) for p in sorted((root / "outbound").glob("*")) if p.is_dir()}
        mine = f"{self.user}+"
        inbound = {
            p.name: _read(p)
            for p in sorted((root / "inbound").glob("*"))
            if p.is_dir() and not p.name.startswith(".") and (self.instructor or p.name.startswith(mine))
        }
        own = root / "feedback" / self.user
        feedback = {p.name: base64.b64encode(p.read_bytes()).decode() for p in sorted(own.glob("*.html"))}
        self.reply(
            {
                "user": self.user,
                "instructor": self.instructor,
                "outbound": outbound,
                "inbound": inbound,
                "feedback": feedback,
            }
        )


class Inbound(Handler):
    def post(self, course, assignment):
        """A submission, filed under the token's owner (never a name the request gives)."""
        root = self.course(course)
        if not (root / "outbound" / _name(assignment)).is_dir():
            raise web.HTTPError(404, "no such assignment has been released")
        files = _files(self.body())
        stamps = [data.decode("utf-8", "replace").strip() for path, data in files if path == "timestamp.txt"]
        now = datetime.datetime.now(datetime.timezone.utc)
        try:
            when = datetime.datetime.strptime(stamps[0], "%Y-%m-%d %H:%M:%S.%f %Z").replace(
                tzinfo=datetime.timezone.utc
            )
        except (IndexError, ValueError):
            raise web.HTTPError(400, "a submission needs its timestamp.txt, in nbgrader's format") from None
        if abs(when - now) > TIMESTAMP_SLACK:
            raise web.HTTPError(400, "the submission's timestamp is not now")
        # the learner's submissions (names sort by time within an assignment): the oldest of this assignment go
        # to make room for the new one, and what is left must fit the quota with it
        mine = sorted(p for p in (root / "inbound").glob(f"{self.user}+*") if p.is_dir())
        same = [p for p in mine if p.name.startswith(f"{self.user}+{assignment}+")]
        dropped = same[: max(0, len(same) - (KEEP - 1))]
        total = sum(len(data) for _, data in files) + sum(_size(p) for p in mine if p not in dropped)
        if total > self.quota:
            raise web.HTTPError(
                413,
                "your submissions to this course would take %.1f MiB, more than the %d MiB a learner may keep: "
                "submit the assignment's notebooks only, or ask an instructor" % (total / 2**20, self.quota >> 20),
            )
        name = f"{self.user}+{assignment}+{stamps[0]}+{secrets.token_urlsafe(9)}"
        _write(root / "inbound" / name, files)
        for old in dropped:
            shutil.rmtree(old, ignore_errors=True)
        self.reply({"name": name})


class Outbound(Handler):
    def put(self, course, assignment):
        self.need_instructor()
        _write(self.course(course) / "outbound" / _name(assignment), _files(self.body()))
        self.reply({"released": assignment})

    def delete(self, course, assignment):
        self.need_instructor()
        shutil.rmtree(self.course(course) / "outbound" / _name(assignment), ignore_errors=True)
        self.reply({"removed": assignment})


class Feedback(Handler):
    def put(self, course, learner):
        self.need_instructor()
        files = _files(self.body())
        if any("/" in path or not path.endswith(".html") for path, _ in files):
            raise web.HTTPError(400, "feedback is a list of .html files")
        folder = self.course(course) / "feedback" / _name(learner)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        for path, data in files:
            (folder / path).write_bytes(data)
        self.reply({"released": len(files)})


def make_app(store: Path, instructors: set, prefix: str, quota_mib: int = DEFAULT_QUOTA_MIB) -> web.Application:
    store.mkdir(parents=True, exist_ok=True, mode=0o700)
    store.chmod(0o700)
    args = {"store": store, "hub_auth": HubAuth(), "instructors": instructors, "quota": quota_mib << 20}
    api = prefix.rstrip("/") + "/api/([^/]+)/"
    return web.Application(
        [
            (api + "view", View, args),
            (api + "inbound/([^/]+)", Inbound, args),
            (api + "outbound/([^/]+)", Outbound, args),
            (api + "feedback/([^/]+)", Feedback, args),
        ]
    )


def main() -> int:
    from urllib.parse import urlparse

    url = urlparse(os.environ["JUPYTERHUB_SERVICE_URL"])
    store = Path(os.environ["ATTN_EXCHANGE_STORE"])
    instructors = {n.strip() for n in os.environ.get("ATTN_INSTRUCTORS", "").split(",") if n.strip()}
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/exchange/")
    app = make_app(store, instructors, prefix, int(os.environ.get("ATTN_EXCHANGE_QUOTA_MIB", DEFAULT_QUOTA_MIB)))
    # where it listens: the URL's host (127.0.0.1 on one machine); on Kubernetes every address of the hub's pod
    HTTPServer(app, max_body_size=MAX_BODY).listen(url.port, os.environ.get("ATTN_EXCHANGE_BIND", url.hostname))
    print(f"nbgrader exchange service on {url.geturl()}, store {store}", file=sys.stderr, flush=True)
    ioloop.IOLoop.current().start()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
