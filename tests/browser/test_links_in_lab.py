"""Every link of both READMEs, both notebook indexes and the glossary, clicked inside JupyterLab as a learner clicks
it: it opens the file it names (no "is a directory" or "cannot open" dialog) and, for a #anchor, scrolls to that
heading. Each distinct target is clicked once, from the first of those files that links it. The fast check of the
same links, without a browser, is tests/course/test_links.py.
"""

from __future__ import annotations

import posixpath
import re
import time
from pathlib import PurePosixPath
from urllib.parse import unquote

import pytest
from jlab import ROOT, skip_unless_browser_tests

from tests.course.test_links import FRONT_DOORS, links

skip_unless_browser_tests()

# the local links of the current document as JupyterLab rendered them, in source order: its heading marks and the
# web addresses it turns into links left out (a local link's href is the server's /files/ URL, or #anchor)
_LOCAL = """[...w.node.querySelectorAll('.jp-RenderedMarkdown a[href]')].filter(a =>
    !a.classList.contains('jp-InternalAnchorLink')
    && (a.getAttribute('href').startsWith('#') || a.href.startsWith(location.origin + '/')))"""

_LINKS_JS = (
    """() => {
  const w = window.jupyterapp.shell.currentWidget;
  if (!w || !w.node.querySelector('.jp-RenderedMarkdown')) return null;
  return %s.length;
}"""
    % _LOCAL
)

# JupyterLab resolves each file link, hands it to its own click handler, and only then rewrites its href to the
# server's /files/ URL: a click before that follows the bare href (a long page's last links are resolved last)
_HANDLED_JS = (
    """(i) => {
  const w = window.jupyterapp.shell.currentWidget;
  const href = %s[i].getAttribute('href');
  return href.startsWith('#') || href.startsWith(location.origin);
}"""
    % _LOCAL
)

_CLICK_JS = (
    """(i) => {
  const w = window.jupyterapp.shell.currentWidget;
  const a = %s[i];
  a.scrollIntoView({block: 'center'});
  a.click();
}"""
    % _LOCAL
)


def _local(target: str) -> bool:
    return not re.match(r"[a-z][a-z0-9+.-]*:", target)  # https:, mailto:: the web, not JupyterLab's


# where the learner is now: the open document's path, any dialog, and whether the anchor's heading is in view
_WHERE_JS = """(fragment) => {
  const w = window.jupyterapp.shell.currentWidget;
  const dialog = document.querySelector('.jp-Dialog');
  const out = {path: w && w.context ? w.context.path : null, dialog: dialog ? dialog.innerText.slice(0, 300) : '',
               found: false, inView: false};
  if (w && fragment) {
    const esc = CSS.escape(fragment);
    const el = w.node.querySelector(`[data-jupyter-id="${esc}"], [id="${esc}"]`);
    if (el) {
      out.found = true;
      const box = w.node.getBoundingClientRect(), r = el.getBoundingClientRect();
      out.inView = r.top >= box.top - 5 && r.top <= box.top + box.height * 0.6;
    }
  }
  return out;
}"""


def _targets():
    """(source file, position among its local links, repository path it lands on, fragment), each target once."""
    seen, found = set(), []
    for source in FRONT_DOORS:
        local = [t for t in links((ROOT / source).read_text(encoding="utf-8")) if _local(t)]
        for index, target in enumerate(local):
            file_part, _, fragment = target.partition("#")
            lands = posixpath.normpath(str(PurePosixPath(source).parent / unquote(file_part))) if file_part else source
            key = (lands, unquote(fragment)) if file_part else (source, lands, unquote(fragment))
            if key not in seen:
                seen.add(key)
                found.append((source, index, lands, unquote(fragment)))
    return found


def _open(page, path, count=None):
    """Close everything, then open ``path`` as a learner sees it: rendered (as make lab shows the index). Waits until
    it is the current document and shows ``count`` local links (any number, when None)."""
    # a notebook a link opened is "changed" once its kernel reports its language: disposed without asking to save,
    # at once (a view still closing when the path is opened again would be the one the document manager reveals)
    page.evaluate(
        """(p) => { const app = window.jupyterapp;
      for (const w of [...app.shell.widgets('main')]) {
        if (w.context) w.context.model.dirty = false;
        w.dispose();
      }
      return app.commands.execute('docmanager:open', {path: p, factory: 'Markdown Preview'}); }""",
        path,
    )
    page.wait_for_function(
        """([path, count]) => {
      const w = window.jupyterapp.shell.currentWidget;
      if (!w || !w.context || w.context.path !== path || !w.node.querySelector('.jp-RenderedMarkdown')) return false;
      const shown = %s.length;
      return count === null ? shown > 0 : shown === count;
    }"""
        % _LOCAL,
        arg=[path, count],
        timeout=30_000,
    )


def _landed(page, path, fragment, timeout_s=20):
    deadline = time.monotonic() + timeout_s
    while True:
        where = page.evaluate(_WHERE_JS, fragment)
        if where["dialog"] or (where["path"] == path and (not fragment or where["inView"])):
            return where
        if time.monotonic() > deadline:
            return where
        page.wait_for_timeout(200)


# back to the source document: everything a link opened is closed (without a save prompt: a notebook counts as
# changed once its kernel reports its language), the source is shown again, scrolled where the learner left it
_BACK_JS = """(sourceId) => { const app = window.jupyterapp;
  for (const w of [...app.shell.widgets('main')]) {
    if (w.id === sourceId) continue;
    if (w.context) w.context.model.dirty = false;
    w.dispose();
  }
  app.shell.activateById(sourceId);
}"""


@pytest.mark.parametrize("source", FRONT_DOORS)
def test_every_link_opens_its_file_or_heading_in_jupyterlab(source, lab_server, page):
    page.goto(lab_server.url(source))
    page.wait_for_function(
        "() => window.jupyterapp && window.jupyterapp.commands.hasCommand('docmanager:open')", timeout=60_000
    )
    # the URL's own document opens a second or two after the commands exist: once it has, nothing opens behind our
    # back (opened after the first click, it took the focus from the link's target)
    page.wait_for_function(
        "(p) => [...window.jupyterapp.shell.widgets('main')].some(w => w.context && w.context.path === p)",
        arg=source,
        timeout=60_000,
    )
    count = len([t for t in links((ROOT / source).read_text(encoding="utf-8")) if _local(t)])
    _open(page, source)
    rendered = page.evaluate(_LINKS_JS)
    assert rendered == count, f"{source}: JupyterLab rendered {rendered} local links, the Markdown has {count}"
    source_id = page.evaluate("() => window.jupyterapp.shell.currentWidget.id")
    wrong = []
    for n, (_, index, lands, fragment) in enumerate(t for t in _targets() if t[0] == source):
        target = lands + (f"#{fragment}" if fragment else "")
        page.evaluate(_BACK_JS, source_id)
        if page.locator(".jp-Dialog").count():
            page.keyboard.press("Escape")
        page.wait_for_function(_HANDLED_JS, arg=index, timeout=60_000)
        page.evaluate(_CLICK_JS, index)  # the learner's click: JupyterLab's own handler opens the target
        where = _landed(page, lands, fragment)
        if where["dialog"]:
            wrong.append(f"link {index} -> {target}: JupyterLab says {where['dialog']!r}")
            page.keyboard.press("Escape")
        elif where["path"] != lands:
            wrong.append(f"link {index} -> {target}: opened {where['path']!r}")
        elif fragment and not where["found"]:
            wrong.append(f"link {index} -> {target}: no such heading in JupyterLab's rendering")
        elif fragment and not where["inView"]:
            wrong.append(f"link {index} -> {target}: opened at the top, not at the heading")
        if n % 10 == 9:
            lab_server.shutdown_kernels()  # notebooks opened by their links start kernels: free the CPU
    assert not wrong, f"{source}:\n  " + "\n  ".join(wrong)
