"""The built site in a real browser: headless Chromium, driven over the DevTools protocol.

The site is served on loopback under the same path as on GitHub Pages. Chromium talks
the DevTools protocol over a pipe (``--remote-debugging-pipe``: file descriptors 3 and 4,
messages ending in a NUL byte), so no extra package is needed. Without Chromium the test
is skipped, except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import http.server
import json
import os
import select
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docs_support import SITE_PREFIX, BuiltSite

pytestmark = pytest.mark.slow

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    explicit = os.environ.get("STEADYLOOP_CHROMIUM")
    if explicit:
        return explicit
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


class DevTools:
    """A minimal DevTools-protocol client over Chromium's debugging pipe."""

    def __init__(self, binary: str, profile: Path) -> None:
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def wire() -> None:  # in the child: the pipe ends become fds 3 and 4
            a = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [
            binary,
            "--headless=new",
            "--remote-debugging-pipe",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-extensions",
            "--no-first-run",
            "--no-default-browser-check",
            f"--user-data-dir={profile}",
            "about:blank",
        ]
        self.log = profile / "chromium.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                close_fds=False,
                preexec_fn=wire,  # noqa: PLW1509 - wires fds 3 and 4 before exec
            )
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer = b""
        self._next_id = 0
        self.session: str | None = None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.call("Browser.close", timeout=5)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        os.close(self._to_child)
        os.close(self._from_child)

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer from Chromium")
            ready, _, _ = select.select([self._from_child], [], [], left)
            if ready:
                chunk = os.read(self._from_child, 1 << 16)
                if not chunk:
                    raise RuntimeError(
                        f"Chromium exited: {self.log.read_text(errors='replace')[-2000:]}"
                    )
                self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        message: dict[str, Any] = json.loads(raw)
        return message

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        timeout: float = 30,
        session: bool = True,
    ) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            answer = self._read_message(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                result: dict[str, Any] = answer.get("result", {})
                return result

    def open_tab(self) -> None:
        target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)
        attached = self.call(
            "Target.attachToTarget",
            {"targetId": target["targetId"], "flatten": True},
            session=False,
        )
        self.session = attached["sessionId"]

    def evaluate(self, expression: str) -> Any:
        result = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, *, timeout: float = 20, what: str = "") -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            with contextlib.suppress(RuntimeError):  # mid-navigation, the context may vanish
                last = self.evaluate(expression)
                if last:
                    return last
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what or expression} (last value {last!r})")

    def goto(self, url: str) -> None:
        self.call("Page.navigate", {"url": url})
        self.wait_for(
            f"document.readyState === 'complete' && location.href === {json.dumps(url)}",
            what=f"page {url}",
        )

    def loaded(self, path: str) -> None:
        self.wait_for(
            f"document.readyState === 'complete' && location.pathname === {json.dumps(path)}",
            what=f"page {path}",
        )

    def search(self, query: str) -> list[str]:
        """Type a query in the search box; return the result links once they appear."""
        self.evaluate(
            "(() => { const t = document.querySelector('input[data-md-toggle=search]');"
            " t.checked = true; t.dispatchEvent(new Event('change'));"
            " const i = document.querySelector('input.md-search__input'); i.focus(); return true })()"
        )
        self.call("Input.insertText", {"text": query})
        links: list[str] = self.wait_for(
            "(() => { const a = [...document.querySelectorAll('.md-search-result__item a')]"
            ".map(x => x.getAttribute('href')); return a.length ? a : null })()",
            what=f"search results for {query!r}",
        )
        return links


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serve(site: Path, tmp: Path) -> Iterator[str]:
    """Serve the site on loopback at the path it has on GitHub Pages."""
    root = tmp / "www"
    root.mkdir()
    (root / SITE_PREFIX.strip("/")).symlink_to(site, target_is_directory=True)
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{SITE_PREFIX}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[DevTools]:
    binary = find_chromium()
    if binary is None:
        message = "Chromium is not installed (apt-get install chromium)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    profile = tmp_path / "profile"
    profile.mkdir()
    tools = DevTools(binary, profile)
    try:
        tools.call("Browser.getVersion", session=False, timeout=60)
        tools.open_tab()
        yield tools
    finally:
        tools.close()


def test_site_in_a_browser(built_site: BuiltSite, browser: DevTools, tmp_path: Path) -> None:
    """Switch language, search in each language, and read a notebook's output, as a reader."""
    with serve(built_site.root, tmp_path) as base:
        # English home page, then the language switch to Chinese.
        browser.goto(base)
        assert browser.evaluate("document.documentElement.lang") == "en"
        browser.evaluate("document.querySelector('a.md-select__link[hreflang=zh]').click()")
        browser.loaded(f"{SITE_PREFIX}zh/")
        assert browser.evaluate("document.documentElement.lang") == "zh"

        # Chinese search finds the Chinese journal page.
        links = browser.search("幂等键")
        assert any("explanation/journal/" in link for link in links), links

        # From a Chinese page, the switch lands on the same page in English.
        browser.goto(f"{base}zh/explanation/journal/")
        browser.evaluate("document.querySelector('a.md-select__link[hreflang=en]').click()")
        browser.loaded(f"{SITE_PREFIX}explanation/journal/")

        # English search.
        links = browser.search("idempotency")
        assert any("explanation/journal/" in link for link in links), links

        # The notebook pages show the outputs the build produced, in both languages.
        for prefix in ("", "zh/"):
            browser.goto(f"{base}{prefix}tutorials/notebooks/quickstart/")
            output = browser.wait_for(
                "[...document.querySelectorAll('.jp-OutputArea-output')]"
                ".map(x => x.innerText).join('\\n')",
                what="notebook output",
            )
            assert "SQLiteJournal" in output
            assert "ConflictError" in output and "IdempotencyKeyReused" in output
