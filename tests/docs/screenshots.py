"""Screenshots of every page of a built site, both languages, at 1366 px and 390 px.

Run: ``uv run mkdocs build -d /tmp/site && uv run python tests/docs/screenshots.py
/tmp/site /tmp/shots [page ...]`` -- one PNG per page and width (the first
``--height`` pixels of the page, 4000 by default), for a person to look at what no test
checks. Uses the same headless Chromium helper as the browser test.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from browser_support import DevTools, find_chromium, serve


def main() -> None:
    """Take the screenshots."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("pages", nargs="*", help="pages below the site root (default: all)")
    parser.add_argument("--height", type=int, default=4000)
    parser.add_argument("--widths", default="1366,390")
    args = parser.parse_args()
    binary = find_chromium()
    if binary is None:
        sys.exit("Chromium is not installed")
    pages = args.pages or sorted(
        "" if p.parent == args.site else p.parent.relative_to(args.site).as_posix() + "/"
        for p in args.site.rglob("index.html")
    )
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        profile = Path(tmp) / "profile"
        profile.mkdir()
        browser = DevTools(binary, profile)
        try:
            browser.call("Browser.getVersion", session=False, timeout=60)
            browser.open_tab()
            with serve(args.site, Path(tmp)) as base:
                for page in pages:
                    for width in (int(w) for w in args.widths.split(",")):
                        browser.viewport(width, 900)
                        browser.goto(base + page)
                        browser.wait_for(
                            "document.querySelectorAll('pre.mermaid').length === 0", timeout=10
                        ) if browser.evaluate("!!document.querySelector('pre.mermaid')") else None
                        time.sleep(0.8)  # Material's tabs and fonts fade in after load
                        name = (page.strip("/").replace("/", "_") or "home") + f"-{width}.png"
                        browser.screenshot(args.out / name, max_height=args.height)
                        print(args.out / name)
        finally:
            browser.close()


if __name__ == "__main__":
    main()
