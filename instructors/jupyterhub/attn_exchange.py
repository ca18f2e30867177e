"""nbgrader's side of the workshop's exchange service (exchange_service.py): nbgrader's own exchange classes, working
on a private mirror of what the service lets this hub user see, with every change sent to the service.

Each operation first mirrors, into a folder only its user can read, what the service shows the token's owner (the
released assignments; their own submissions and feedback, or, for an instructor, every submission), runs nbgrader's
filesystem logic there unchanged (so the assignment list, fetch, submit, collect and feedback behave as nbgrader's
own), then sends what the operation made: a submission, a release, feedback. The service files a submission under
the hub user its token belongs to, so a student id given on the command line or in the environment changes nothing.

The token is the server's own ``$JUPYTERHUB_API_TOKEN``; the service's address is ``$ATTN_EXCHANGE_URL`` (both set
by the hub for every server; an instructor working outside the hub sets them, with a token from the hub's Token
page). nbgrader_config.py beside this file selects these classes.
"""

from __future__ import annotations

import base64
import glob
import json
import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path

from jupyter_core.paths import jupyter_data_dir
from nbgrader.exchange.default import Exchange as FilesystemExchange
from nbgrader.exchange.default import (
    ExchangeCollect,
    ExchangeFetchAssignment,
    ExchangeFetchFeedback,
    ExchangeList,
    ExchangeReleaseAssignment,
    ExchangeReleaseFeedback,
    ExchangeSubmit,
)
from nbgrader.utils import notebook_hash
from traitlets import Unicode, default

TIMEOUT = 120


def _files(folder: Path) -> list[dict]:
    return [
        {"path": p.relative_to(folder).as_posix(), "content": base64.b64encode(p.read_bytes()).decode()}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    ]


def _unpack(folder: Path, files: list[dict]) -> None:
    for item in files:
        target = folder / item["path"]
        if folder.resolve() not in target.resolve().parents:
            continue  # the service never sends such a path; a mirror must not write outside itself all the same
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(base64.b64decode(item["content"]))


class ServiceExchange(FilesystemExchange):
    """nbgrader's filesystem exchange on a private mirror of the service."""

    url = Unicode(help="the exchange service's URL (default: $ATTN_EXCHANGE_URL)").tag(config=True)

    @default("url")
    def _url_default(self):
        return os.environ.get("ATTN_EXCHANGE_URL", "")

    @default("root")
    def _root_default(self):
        return os.path.join(jupyter_data_dir(), "attention-by-hand-exchange", "mirror")

    # ------------------------------------------------------------------------------------------ the service
    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
        if not self.url or not token:
            self.fail("the exchange service is not configured: ATTN_EXCHANGE_URL and JUPYTERHUB_API_TOKEN are needed")
        request = urllib.request.Request(
            f"{self.url.rstrip('/')}/api/{self.coursedir.course_id}/{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                why = json.loads(exc.read() or b"{}").get("error") or exc.reason
            except (ValueError, AttributeError):
                why = exc.reason
            self.fail(f"the exchange refused: {exc.code} {why}")
        except OSError as exc:
            self.fail(f"the exchange cannot be reached: {exc}")

    def pull(self) -> dict:
        """Mirror what the service shows this user; returns the view."""
        if not self.coursedir.course_id:
            self.fail("No course id specified. Re-run with --course flag.")
        view = self._call("GET", "view")
        private = Path(self.root).parent
        private.mkdir(parents=True, exist_ok=True)
        private.chmod(0o700)
        course = Path(self.root) / self.coursedir.course_id
        shutil.rmtree(course, ignore_errors=True)
        for kind in ("outbound", "inbound", "feedback"):
            (course / kind).mkdir(parents=True, exist_ok=True)
        for kind in ("outbound", "inbound"):
            for name, files in view[kind].items():
                _unpack(course / kind / name, files)
        for name, content in view["feedback"].items():
            (course / "feedback" / name).write_bytes(base64.b64decode(content))
        self.view = view
        return view

    def start(self):
        self.pull()
        result = super().start()
        self.push()
        return result

    def push(self):
        """Send what the operation made (nothing, for a fetch or a list)."""


class ServiceFetchAssignment(ServiceExchange, ExchangeFetchAssignment):
    pass


class ServiceFetchFeedback(ServiceExchange, ExchangeFetchFeedback):
    pass


class ServiceList(ServiceExchange, ExchangeList):
    def remove_files(self):
        if self.inbound or self.cached or not self.view.get("instructor"):
            self.fail("this exchange removes only released assignments, and only an instructor may")
        assignments = self.parse_assignments()
        for info in assignments:
            self._call("DELETE", f"outbound/{info['assignment_id']}")
        return assignments


class ServiceSubmit(ServiceExchange, ExchangeSubmit):
    def push(self):
        submitted = Path(self.inbound_path) / self.assignment_filename
        self._call("POST", f"inbound/{self.coursedir.assignment_id}", {"files": _files(submitted)})
        self.pull()


class ServiceReleaseAssignment(ServiceExchange, ExchangeReleaseAssignment):
    def push(self):
        self._call("PUT", f"outbound/{self.coursedir.assignment_id}", {"files": _files(Path(self.dest_path))})


class ServiceCollect(ServiceExchange, ExchangeCollect):
    # the service filed each submission under its hub user: the Unix owner of the mirror's copy says nothing
    check_owner = False


class ServiceReleaseFeedback(ServiceExchange, ExchangeReleaseFeedback):
    def push(self):
        """Each learner's feedback to that learner alone (nbgrader's names for it, from the submission's secret)."""
        pattern = self.coursedir.format_path(self.coursedir.feedback_directory, "*", self.coursedir.assignment_id)
        for folder in map(Path, sorted(glob.glob(pattern))):
            secret_file = folder / "submission_secret.txt"
            if not secret_file.is_file():
                continue
            learner = Path(os.path.relpath(folder, self.coursedir.root)).parts[1]
            secret = secret_file.read_text()
            files = [
                {
                    "path": f"{notebook_hash(secret=secret, notebook_id=html.stem)}.html",
                    "content": base64.b64encode(html.read_bytes()).decode(),
                }
                for html in sorted(folder.glob("*.html"))
            ]
            if files:
                self._call("PUT", f"feedback/{learner}", {"files": files})


CLASSES = {
    "exchange": ServiceExchange,
    "fetch_assignment": ServiceFetchAssignment,
    "fetch_feedback": ServiceFetchFeedback,
    "release_assignment": ServiceReleaseAssignment,
    "release_feedback": ServiceReleaseFeedback,
    "list": ServiceList,
    "submit": ServiceSubmit,
    "collect": ServiceCollect,
}


def configure(c) -> None:
    """Point nbgrader's ExchangeFactory at these classes (a config file's ``c``)."""
    for name, cls in CLASSES.items():
        setattr(c.ExchangeFactory, name, cls)
