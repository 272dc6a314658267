"""The how-to "Check your framework's session store": its example store runs as the page says.

The page's files are taken from the page itself, the store is registered through a real
entry point (a distribution's metadata on the path of a fresh interpreter), and the
page's command runs the hostile pack on its two backends.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import jsonschema
from replay_helpers import replay_cli

from steadyloop.replay import report_schema

PAGES = Path(__file__).resolve().parents[3] / "docs"
HOWTO = PAGES / "en" / "how-to" / "check-a-framework-store.md"
_FILE_BLOCK = re.compile(
    r"^```(?:python|toml)\n# (?P<name>[\w.-]+\.(?:py|toml))\n(?P<code>.*?)^```", re.S | re.M
)


def page_files(page: Path) -> dict[str, str]:
    """The files a page shows, by name, exactly as printed."""
    text = page.read_text(encoding="utf-8")
    return {m["name"]: f"# {m['name']}\n{m['code']}" for m in _FILE_BLOCK.finditer(text)}


def install(site: Path) -> None:
    """Put the page's module on ``site`` with the entry point its pyproject declares."""
    files = page_files(HOWTO)
    assert set(files) == {"kv_store.py", "pyproject.toml"}
    site.mkdir()
    (site / "kv_store.py").write_text(files["kv_store.py"], encoding="utf-8")
    points = tomllib.loads(files["pyproject.toml"])["project"]["entry-points"]
    info = site / "kv_store-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kv-store\nVersion: 0.1\n")
    lines = [
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items())
        for group, eps in points.items()
    ]
    (info / "entry_points.txt").write_text("\n".join(lines), encoding="utf-8")


def test_howto_store_agrees_on_the_hostile_pack(tmp_path: Path) -> None:
    """The page's store, found by its entry point, agrees on every case it can run; the rest are not applicable."""
    site = tmp_path / "site"
    install(site)
    store_file = tmp_path / "kv.json"
    report_file = tmp_path / "report.json"
    done = replay_cli(
        "run",
        "--pack",
        "hostile",
        "-b",
        f"kv+memory,kv+file://{store_file}",
        "--report",
        str(report_file),
        env={"PYTHONPATH": str(site)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(report_file.read_text(encoding="utf-8"))
    jsonschema.validate(report, report_schema())
    assert report["references"] == {"kv": "kv+memory"}
    statuses = {}
    for case in report["cases"]:
        assert case["differences"] == []
        statuses[case["case_id"]] = {r["backend"]: r["status"] for r in case["runs"]}
        assert {c["backend"]: c["reference"] for c in case["comparisons"]} == {
            "kv+memory": "kv+memory",
            "kv+file": "kv+memory",
        }
    ran = [c for c, s in statuses.items() if s == {"kv+memory": "ran", "kv+file": "ran"}]
    skipped = {c for c, s in statuses.items() if "not_applicable" in s.values()}
    assert {"hostile_old_memory", "hostile_caller_edit"} <= skipped
    assert len(ran) >= 12, statuses
    assert store_file.exists() is False or json.loads(store_file.read_text())["sessions"] == {}


def test_a_store_whose_opener_raises_exits_2_with_one_line(tmp_path: Path) -> None:
    """The page's opener refusing an unknown backend exits 2 with one line naming the store."""
    site = tmp_path / "site"
    install(site)
    done = replay_cli("run", "-b", "kv+memory,kv+oracle", env={"PYTHONPATH": str(site)})
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == [
        "error: store 'kv+oracle' cannot be opened: ValueError: kv has no 'oracle' backend"
    ]
