"""The performance page's figures: strict about their result files, and sourced and dated."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from docs_support import ROOT
from test_docs_hooks import _page, load_hook

RESULTS = ROOT / "benchmarks" / "results"
hook = load_hook("benchmarks")


def result(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RESULTS / name).read_text(encoding="utf-8"))
    return data


def results_dir(tmp_path: Path, **files: dict[str, Any]) -> Path:
    for stem, data in files.items():
        (tmp_path / f"{stem}.json").write_text(json.dumps(data), encoding="utf-8")
    return tmp_path


def page_source(lang: str) -> str:
    return (ROOT / "docs" / lang / "performance.md").read_text(encoding="utf-8")


def old_audit_shape() -> dict[str, Any]:
    """audit.json as the renderer used to read it: ``runs`` and ``claim_ms``."""
    data = copy.deepcopy(result("audit.json"))
    for backend in data["backends"].values():
        if "after" in backend:
            backend["runs"] = backend.pop("after")
            del backend["before"]
            for run in backend["runs"]:
                run["claim_ms"] = run.pop("submit_to_claim_ms")
    return data


AUDIT_PAGE = """# P

<!-- benchmark-if audit.json -->
## Audit

<!-- benchmark-chart audit.json -->
<!-- benchmark-end audit.json -->
"""


def test_a_result_missing_a_field_fails_naming_the_file_and_the_field(tmp_path: Path) -> None:
    """An audit.json without the ``before`` runs its renderer reads stops the render, naming both."""
    directory = results_dir(tmp_path, audit=old_audit_shape())
    with pytest.raises(Exception) as caught:  # noqa: PT011 - the type is checked below
        hook.render_page(AUDIT_PAGE, "en", directory)
    assert type(caught.value).__name__ == "FigureError"
    message = str(caught.value)
    assert "benchmarks/results/audit.json" in message
    assert "`backends.sqlite.before`" in message and "missing" in message


def test_the_build_fails_naming_the_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the MkDocs hook the error is a PluginError naming the page, the file and the field."""
    from mkdocs.exceptions import PluginError

    directory = results_dir(tmp_path, audit=old_audit_shape())
    monkeypatch.setattr(
        hook, "render_page", lambda md, lang, d=directory, f=hook.render_page: f(md, lang, d)
    )
    with pytest.raises(PluginError) as caught:
        hook.on_page_markdown(AUDIT_PAGE, _page("zh/performance.md"))
    message = str(caught.value)
    assert message.startswith("zh/performance.md: ")
    assert "audit.json" in message and "backends.sqlite.before" in message


def test_a_missing_number_fails_rather_than_drawing_an_empty_bar(tmp_path: Path) -> None:
    """A run that lacks ``tasks_per_s`` fails; no chart is drawn with a gap where it was."""
    data = result("audit.json")
    last = len(data["backends"]["postgresql"]["after"]) - 1
    del data["backends"]["postgresql"]["after"][last]["tasks_per_s"]
    directory = results_dir(tmp_path, audit=data)
    with pytest.raises(Exception, match=rf"`backends\.postgresql\.after\.{last}\.tasks_per_s`"):
        hook.render_page(AUDIT_PAGE, "en", directory)


def test_a_result_without_its_date_and_load_fails(tmp_path: Path) -> None:
    """Every result must carry the ``measured`` entry, even one drawn generically."""
    directory = results_dir(tmp_path, extra={"rows": {"a": {"median_us": 5}}})
    with pytest.raises(Exception, match=r"extra\.json: `measured` is missing"):
        hook.render_page("<!-- benchmark-others -->\n", "en", directory)


def test_a_chart_of_a_file_that_does_not_exist_fails(tmp_path: Path) -> None:
    """A chart marker outside any benchmark-if block, for a file not there, is an error."""
    with pytest.raises(Exception, match=r"gone\.json: does not exist"):
        hook.render_page("<!-- benchmark-chart gone.json -->\n", "en", tmp_path)


def test_every_committed_result_has_its_measured_entry() -> None:
    """Each result records a date (or null, with when it was committed) and the load averages."""
    for path in sorted(RESULTS.glob("*.json")):
        measured = json.loads(path.read_text(encoding="utf-8"))["measured"]
        assert {"date", "load_average_at_start", "load_average_at_end"} <= set(measured), path
        if measured["date"] is None:
            assert re.fullmatch(r"\d{4}-\d\d-\d\d, [0-9a-f]{7,}", measured["committed"]), path
        else:
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", measured["date"]), path


DATED = re.compile(r"measured \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC|date not recorded")
DATED_ZH = re.compile(r"测量于 \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC|未记录测量日期")
LOADED = re.compile(r"load average (\d|not recorded)|平均负载 \d|未记录平均负载")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_figure_on_the_page_names_its_result_and_date(lang: str) -> None:
    """Each chart's caption, and each section drawn from a result, names the file, date and load."""
    text, used = hook.render_page(page_source(lang), lang)
    assert set(used) == {p.name for p in RESULTS.glob("*.json")}
    dated = DATED_ZH if lang == "zh" else DATED
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", text, re.S)
    assert len(captions) >= len(used)
    for caption in captions:
        assert re.search(r"benchmarks/results/\w+\.json", caption), caption
        assert dated.search(caption) and LOADED.search(caption), caption
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    drawn = [s for s in sections if ("|---|" in s or "<figure" in s) and "{#result-files}" not in s]
    assert len(drawn) == len(used)
    for section in drawn:
        line = re.search(r'<p class="steadyloop-source" markdown="1">(.*?)</p>', section)
        assert line is not None, section.splitlines()[0]
        assert re.search(r"`benchmarks/results/\w+\.json`", line[1]) and dated.search(line[1])


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_audit_section_draws_the_numbers_its_prose_reads(lang: str) -> None:
    """The audit charts have their bars, and the claims of the prose below hold for audit.json."""
    text, _ = hook.render_page(page_source(lang), lang)
    section = text.split("{#audit-queue}")[1].split("\n## ")[0]
    assert "skipped" not in section and "已跳过" not in section
    charts = section.split("<figure")[1:]
    assert len(charts) == 2
    data = result("audit.json")
    ran = {n: b for n, b in data["backends"].items() if "skipped" not in b}
    bars = sum(len(b[side]) for b in ran.values() for side in ("before", "after"))
    assert charts[0].count("</rect>") == bars and charts[1].count("</rect>") == bars
    # What the prose says, checked against the numbers it is written over.
    poll_ms = 200
    for name, backend in ran.items():
        for side in ("before", "after"):
            runs = {r["workers"]: r for r in backend[side]}
            most = max(runs)
            p50 = [runs[w]["submit_to_claim_ms"]["p50"] for w in sorted(runs)]
            if name == "sqlite":
                # One writer at a time: more workers finish fewer tasks per second.
                assert runs[most]["tasks_per_s"] < runs[1]["tasks_per_s"], name
                assert p50[0] < poll_ms and p50[-1] < p50[0], p50
            else:
                assert all(runs[w]["submit_to_claim_ms"]["p50"] < 20 for w in runs), name
        if name == "postgresql":
            # More workers are not slower than one (issue 20).
            after = {r["workers"]: r for r in backend["after"]}
            assert after[max(after)]["tasks_per_s"] >= after[1]["tasks_per_s"], name
        for b, a in zip(backend["before"], backend["after"], strict=True):
            assert 0.9 < b["queue_plans_per_task"] - a["queue_plans_per_task"] < 1.1, name
        one = {side: backend[side][0] for side in ("before", "after")}
        assert one["after"]["tasks_per_s"] > one["before"]["tasks_per_s"], name
        assert f"{one['after']['tasks_per_s']:.0f}" in section
    prose = {"en": ("every 0.2 s", "p50 under 20 ms"), "zh": ("每 0.2 秒", "p50 低于 20 毫秒")}
    assert all(claim in page_source(lang) for claim in prose[lang])


def _docs_result(covered: list[str]) -> dict[str, Any]:
    data = result("docs.json")
    data["notebook_seconds"] = {n: 3.5 for n in covered}
    return data


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_build_time_says_which_notebooks_it_covers(lang: str) -> None:
    """A docs.json that executed fewer notebooks than notebooks/ holds says so, naming them."""
    every = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("notebooks/*/*.ipynb"))
    assert len(every) >= 14
    partial = hook.render_known("docs.json", _docs_result(every[:8]), lang)
    assert "!!! warning" in partial and f"{every[-1].removeprefix('notebooks/')}" in partial
    assert f"8 / {len(every)}" in partial
    whole = hook.render_known("docs.json", _docs_result(every), lang)
    assert "!!! warning" not in whole and f"{len(every)} / {len(every)}" in whole


def test_the_build_time_covers_every_notebook_two_at_a_time_with_both_aims() -> None:
    """docs.json times every notebook two at a time, in wall and CPU time, against both aims."""
    data = result("docs.json")
    every = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("notebooks/*/*.ipynb"))
    assert sorted(data["notebook_seconds"]) == every
    assert data["parallel"] == 2
    assert data["cold_seconds"] == pytest.approx(
        data["nbmake_seconds"] + data["build_seconds"], abs=0.02
    )
    assert data["measured"]["date"] and data["measured"]["load_average_at_start"]
    assert sorted(data["notebook_cpu_seconds"]) == every and data["build_cpu_seconds"] > 0
    rows = {
        "en": ("cold strict build: the notebooks", "in CPU time, per core"),
        "zh": ("冷构建：先执行笔记本", "按 CPU 时间折算"),
    }
    for lang, labels in rows.items():
        text = hook.render_known("docs.json", data, lang)
        for label in labels:
            row = next(line for line in text.splitlines() if label in line)
            assert f"≤ {hook.fmt(data['cold_aim_seconds'])}" in row, row
        assert f"{hook.fmt(data['notebook_aim_seconds'])}" in text
        slowest = max(data["notebook_seconds"], key=data["notebook_seconds"].get)
        assert slowest.removeprefix("notebooks/") in text


@pytest.mark.parametrize("name", ["docs.json", "soak.json"])
def test_docs_and_soak_are_tables_not_key_dumps(name: str) -> None:
    """docs.json and soak.json are drawn as labelled tables, not as their JSON keys."""
    data = result(name)
    text = hook.render_known(name, data, "en")
    keys = {k for k in data if k != "measured"}
    for entry in data.get("backends", []):
        keys |= set(entry) - {"backend"}
    assert keys, name
    for key in keys:
        assert f"`{key}`" not in text, key
        assert f"`{key}." not in text, key
    assert "|---|" in text and "<svg" in text
    zh = hook.render_known(name, data, "zh")
    assert "测量" in zh or "压测" in zh


def test_a_backend_that_did_not_run_says_why_and_the_others_are_drawn(tmp_path: Path) -> None:
    """A skipped backend shows its reason in the table; the backends that ran have their bars."""
    data = result("audit.json")
    data["backends"]["postgresql"] = {"skipped": "no server: connection refused"}
    text, _ = hook.render_page(AUDIT_PAGE, "en", results_dir(tmp_path, audit=data))
    assert "skipped: no server: connection refused" in text
    bars = 2 * len(data["backends"]["sqlite"]["after"])
    assert [chart.count("</rect>") for chart in text.split("<figure")[1:]] == [bars, bars]
    assert "postgresql, 1 worker" not in text


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_repeats_table_has_a_row_per_measured_shape(lang: str) -> None:
    """Each shape measured in repeats.json is a row of the page's table, with a kill column per backend."""
    path = hook.RESULTS / "repeats.json"
    data = hook.load(path)
    drawn = hook.render_known(path.name, data, lang)
    lines = [line for line in drawn.splitlines() if line.startswith("| ")]
    assert len(lines) == 1 + len(data["rows"])
    for row in data["rows"]:
        title = row["title"] if lang == "en" else hook.SHAPE_TITLES_ZH[row["shape"]]
        assert any(title in line for line in lines), row["shape"]
    backends = {k.split("_")[1] for k in data["rows"][0] if k.startswith("aimed_")}
    assert sum(b in lines[0] for b in backends) == len(backends)


SNAPSHOTS_PAGE = """# P

<!-- benchmark-if snapshots.json -->
## Snapshots

<!-- benchmark-chart snapshots.json -->
<!-- benchmark-end snapshots.json -->
"""


@pytest.mark.parametrize(
    ("path", "field"),
    [
        (("session_snapshot_bytes", "10000"), "session_snapshot_bytes.10000"),
        (("resume", "100", "records_read"), "resume.100.records_read"),
        (("snapshot_ratio_10000_1000",), "snapshot_ratio_10000_1000"),
    ],
)
def test_the_snapshots_figure_names_a_missing_field(
    tmp_path: Path, path: tuple[str, ...], field: str
) -> None:
    """snapshots.json without a field its renderer draws stops the render, naming the field."""
    data = copy.deepcopy(result("snapshots.json"))
    inner = data
    for key in path[:-1]:
        inner = inner[key]
    del inner[path[-1]]
    with pytest.raises(Exception) as caught:  # noqa: PT011 - the type is checked below
        hook.render_page(SNAPSHOTS_PAGE, "zh", results_dir(tmp_path, snapshots=data))
    assert type(caught.value).__name__ == "FigureError"
    assert "snapshots.json" in str(caught.value) and f"`{field}`" in str(caught.value)


def test_the_snapshots_figure_draws_every_case_in_both_languages() -> None:
    """Every resume case and both snapshot sizes of snapshots.json appear on both pages."""
    data = result("snapshots.json")
    for lang in ("en", "zh"):
        drawn, _ = hook.render_page(SNAPSHOTS_PAGE, lang, RESULTS)
        assert drawn.count("<svg") == 1
        for figures in data["resume"].values():
            assert f"{figures['records_read']:,}" in drawn
        for size in data["session_snapshot_bytes"].values():
            assert f"{size:,}" in drawn


SCALE_PAGE = """# P

<!-- benchmark-if scale.json -->
## Scale

<!-- benchmark-chart scale.json -->
<!-- benchmark-end scale.json -->
"""


def test_the_scale_figure_names_a_missing_field(tmp_path: Path) -> None:
    """scale.json without a figure its renderer draws stops the render, naming the field."""
    data = copy.deepcopy(result("scale.json"))
    row = data["backends"]["sqlite"]["10000"]
    del row["copy_records_per_s"]
    with pytest.raises(Exception) as caught:  # noqa: PT011 - the type is checked below
        hook.render_page(SCALE_PAGE, "en", results_dir(tmp_path, scale=data))
    assert type(caught.value).__name__ == "FigureError"
    assert "`backends.sqlite.10000.copy_records_per_s`" in str(caught.value)


def test_the_scale_figure_shows_every_size_reached_in_both_languages() -> None:
    """Each backend's sizes and their records appear on both pages."""
    data = result("scale.json")
    for lang in ("en", "zh"):
        drawn, _ = hook.render_page(SCALE_PAGE, lang, RESULTS)
        for rows in data["backends"].values():
            for row in rows.values():
                assert f"{row['records']:,}" in drawn


def test_a_result_the_page_names_nowhere_is_described_in_each_pages_language(
    tmp_path: Path,
) -> None:
    """A generic section says what its benchmark measures in the page's language: the docstring in en, `SUMMARY_ZH` in zh, and a script without one fails the zh build."""
    data = json.loads((ROOT / "benchmarks" / "results" / "repeats.json").read_text())
    (tmp_path / "repeats.json").write_text(json.dumps(data))
    en = hook.section(tmp_path / "repeats.json", "en")
    zh = hook.section(tmp_path / "repeats.json", "zh")
    assert "Which frameworks repeat effects" in en
    assert "哪些框架会重复执行副作用" in zh and "Which frameworks" not in zh
    bare = tmp_path / "bench_bare.py"
    bare.write_text('"""Only English here."""\n')
    assert hook._first_docstring_line(bare, "en") == "Only English here."
    with pytest.raises(Exception, match="SUMMARY_ZH") as caught:
        hook._first_docstring_line(bare, "zh")
    assert type(caught.value).__name__ == "FigureError"
