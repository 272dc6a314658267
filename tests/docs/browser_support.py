"""Headless Chromium driven over the DevTools protocol, and the built site served locally.

Chromium talks the DevTools protocol over a pipe (``--remote-debugging-pipe``: file
descriptors 3 and 4, messages ending in a NUL byte), so no extra package is needed.
Events (network requests, exceptions) are kept in ``DevTools.events`` for the caller.
Used by ``test_docs_browser.py`` and by ``screenshots.py``.
"""

from __future__ import annotations

import base64
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

from docs_support import SITE_PREFIX

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
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
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
        self.events: list[dict[str, Any]] = []  # protocol events, oldest first

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
            if "method" in answer and "id" not in answer:
                self.events.append(answer)
                continue
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

    def pump(self, seconds: float = 0.0) -> None:
        """Read the events Chromium has sent (waiting up to ``seconds`` for more)."""
        deadline = time.monotonic() + seconds
        while True:
            ready, _, _ = select.select(
                [self._from_child], [], [], max(0.0, deadline - time.monotonic())
            )
            if not ready:
                break
            chunk = os.read(self._from_child, 1 << 16)
            if not chunk:
                break
            self._buffer += chunk
            while b"\0" in self._buffer:
                raw, _, self._buffer = self._buffer.partition(b"\0")
                message = json.loads(raw)
                if "method" in message:
                    self.events.append(message)
            if time.monotonic() >= deadline:
                break

    def take_events(self, *methods: str) -> list[dict[str, Any]]:
        """Remove and return the buffered events of the given methods."""
        self.pump()
        taken = [e for e in self.events if e["method"] in methods]
        self.events = [e for e in self.events if e["method"] not in methods]
        return taken

    def viewport(self, width: int, height: int) -> None:
        """Lay the page out as a screen ``width`` CSS pixels wide (mobile below 600 px)."""
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
        )

    def screenshot(self, path: Path, *, full_page: bool = True, max_height: int = 16000) -> None:
        """Save a PNG of the page (the whole page, up to ``max_height`` px, by default)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.evaluate(
                "[document.documentElement.scrollWidth, document.documentElement.scrollHeight]"
            )
            width = self.evaluate("window.innerWidth")
            params["clip"] = {
                "x": 0,
                "y": 0,
                "width": width,
                "height": min(size[1], max_height),
                "scale": 1,
            }
            params["captureBeyondViewport"] = True
        data = self.call("Page.captureScreenshot", params, timeout=60)["data"]
        path.write_bytes(base64.b64decode(data))

    def evaluate(self, expression: str) -> Any:
        result = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, *, timeout: float = 60, what: str = "") -> Any:
        """Poll ``expression`` until it is truthy; generous by default (CI may be busy)."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            with contextlib.suppress(RuntimeError):  # mid-navigation, the context may vanish
                last = self.evaluate(expression)
                if last:
                    return last
            time.sleep(0.05)
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
