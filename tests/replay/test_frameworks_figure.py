"""The neighbours page's framework-store figure: every store's pack and 2,000-event times are drawn from frameworks.json, strictly."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = """# P

<!-- benchmark-if frameworks.json -->
<!-- benchmark-chart frameworks.json -->
<!-- benchmark-end frameworks.json -->
"""


def _hook() -> ModuleType:
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    spec = importlib.util.spec_from_file_location(
        "lgreplay_benchmarks_hook", ROOT / "hooks" / "benchmarks.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _result() -> dict[str, Any]:
    row = {"framework": "trpc", "agreed": 20, "diverged": 6, "not_applicable": 0}
    return {
        "long_case": {"events": 2000, "aim_seconds": 60.0, "budget_seconds": 120.0},
        "versions": {"trpc": "1.2.0"},
        "rows": {
            "trpc+memory": {
                "framework": "trpc",
                "reference": True,
                "pack_median_s": 0.071,
                "long_case_s": 0.13,
                "long_case_status": "ran",
            },
            "trpc+sqlite": {
                **row,
                "pack_median_s": 9.845,
                "long_case_s": 22.83,
                "long_case_status": "ran",
            },
            "trpc+redis": {
                **row,
                "pack_median_s": 3.5,
                "long_case_s": None,
                "long_case_status": "timed_out",
            },
        },
        "measured": {
            "date": "2026-12-04T02:00:00Z",
            "load_average_at_start": [9.0, 9.0, 8.0],
            "load_average_at_end": [9.5, 9.0, 8.0],
            "cpus": 2,
            "platform": "Linux",
            "python": "3.11.7",
        },
    }


def _render(tmp_path: Path, data: dict[str, Any], lang: str) -> str:
    (tmp_path / "frameworks.json").write_text(json.dumps(data), encoding="utf-8")
    text, used = _hook().render_page(PAGE, lang, tmp_path)
    assert used == ["frameworks.json"]
    return str(text)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_store_row_shows_its_pack_and_long_case_times(tmp_path: Path, lang: str) -> None:
    """Each store's row holds its pack time and its 2,000-event time, or says it was stopped at the budget."""
    text = _render(tmp_path, _result(), lang)
    rows = {
        line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| `")
    }
    assert set(rows) == {"`trpc+memory`", "`trpc+sqlite`", "`trpc+redis`"}
    assert "| 9.85 | 22.8 |" in rows["`trpc+sqlite`"]
    assert ("stopped after 120 s" if lang == "en" else "120 秒后停止") in rows["`trpc+redis`"]
    assert "<svg" in text and "2026-12-04" in text


@pytest.mark.parametrize("field", ["long_case_s", "long_case_status", "pack_median_s"])
def test_a_row_missing_a_time_fails_naming_the_field(tmp_path: Path, field: str) -> None:
    """A store row without a field the figure reads stops the render, naming the file and the field."""
    data = copy.deepcopy(_result())
    del data["rows"]["trpc+sqlite"][field]
    with pytest.raises(Exception) as caught:  # noqa: PT011 - the type is checked below
        _render(tmp_path, data, "en")
    assert type(caught.value).__name__ == "FigureError"
    assert "frameworks.json" in str(caught.value)
    assert f"rows.trpc+sqlite.{field}" in str(caught.value)


def test_the_committed_result_draws_on_both_pages() -> None:
    """The committed frameworks.json has every field the figure reads, in both languages."""
    hook = _hook()
    for lang in ("en", "zh"):
        text, _ = hook.render_page(PAGE, lang, ROOT / "benchmarks" / "results")
        assert "<svg" in text
