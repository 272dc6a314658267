"""MkDocs hook: draw the committed benchmark results as charts and tables, at build time.

The benchmarks in ``benchmarks/`` write JSON into ``benchmarks/results/``. A page shows
them through marker lines, so it always shows the measurements that are committed:

``<!-- benchmark-sources benchmarks/results -->``
    A list of the result files this build used, with the machine each was measured on.
``<!-- benchmark-if NAME.json -->`` … ``<!-- benchmark-end NAME.json -->``
    Everything between the two lines (headings, prose, charts) is dropped when the
    result file does not exist, so a benchmark that has not run yet leaves no
    placeholder behind.
``<!-- benchmark-chart NAME.json -->``
    Charts (inline SVG, no JavaScript, no image files) and a table of the file. Files
    with a known layout (``journal.json``, ``backends.json``) get charts made for them;
    any other file gets a generic table and a chart of its first median-like column.
``<!-- benchmark-others -->``
    A section for every result file that no ``benchmark-if`` block of the page names,
    so a new benchmark shows on the page the day its result is committed.

Labels follow the page's language (``en/…`` or ``zh/…``). A result file that is not
valid JSON logs a warning, which fails ``mkdocs build --strict``.
"""

from __future__ import annotations

import html
import json
import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mkdocs.structure.pages import Page

log = logging.getLogger("mkdocs.hooks.benchmarks")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

SOURCES = re.compile(r"^<!--\s*benchmark-sources\s+(?P<dir>[\w./-]+)\s*-->\s*$", re.M)
BLOCK = re.compile(
    r"^<!--\s*benchmark-if\s+(?P<name>[\w.-]+\.json)\s*-->\s*$\n"
    r"(?P<body>.*?)"
    r"^<!--\s*benchmark-end\s+(?P=name)\s*-->\s*$\n?",
    re.M | re.S,
)
CHART = re.compile(r"^<!--\s*benchmark-chart\s+(?P<name>[\w.-]+\.json)\s*-->\s*$", re.M)
OTHERS = re.compile(r"^<!--\s*benchmark-others\s*-->\s*$", re.M)

LABELS: dict[str, dict[str, str]] = {
    "en": {
        "file": "result file",
        "machine": "measured on",
        "cpus": "{n} CPU cores",
        "script": "written by",
        "none": "No result file is committed yet.",
        "row": "row",
        "median_us": "median (µs)",
        "p95_us": "p95 (µs)",
        "x_floor": "× fsync floor",
        "syncs": "syncs per append",
        "not_measured": "not measured",
        "journal_chart": "Durable append, median and p95, in microseconds (n = {n} per row)",
        "floor": "write+fsync floor (median)",
        "backend": "backend",
        "p50_ms": "p50 (ms)",
        "p95_ms": "p95 (ms)",
        "one_writer": "1 writer (batches/s)",
        "eight_writers": "{w} writers (batches/s)",
        "speedup": "speedup",
        "settings": "server durability settings",
        "skipped": "skipped: {reason}",
        "latency_chart": "Latency of one append, p50 and p95, in milliseconds (n = {n})",
        "throughput_chart": "Throughput, one record per batch: 1 writer and {w} writers",
        "p50": "p50",
        "p95": "p95",
        "median": "median",
        "generic_intro": "Measured by `{script}`: {what}",
        "generic_what": "Figures from `{name}`, as the benchmark wrote them.",
        "generic_chart": "{column}, by row",
        "key": "key",
        "value": "value",
        "metric": "measure",
        "aim": "aim",
        "loop_chart": "One agent-loop step on SQLite FULL, in microseconds (median of {r} runs)",
        "loop_floor": "write+fsync floor (median)",
        "loop_effect": "per external effect",
        "loop_step": "per step (2 effects)",
        "loop_off": "per step, synchronous=OFF",
        "resume_chart": "Resume of an interrupted run, in milliseconds, by run length",
        "resume_row": "{n} steps",
        "concurrent_chart": "Runs at once in one process: durable effects per second",
        "concurrent_row": "{n} runs",
        "concurrent_row_one": "1 run",
        "grouped": "SQLite FULL, group commit",
        "ungrouped": "SQLite FULL, one commit per append",
        "memory_journal": "memory",
        "concurrent_ratio": "32 runs: SQLite FULL ÷ memory journal",
        "langgraph_ratio": "LangGraph SqliteSaver (sync) per unit ÷ ours per effect",
        "steps": "steps per run",
        "appends": "journal appends per step",
        "fsyncs": "fsync calls per step (strace)",
        "x_floor_effect": "per effect, × floor",
        "x_floor_step": "per step, × floor",
        "sync_share": "of a step, spent in syncs (µs)",
        "sync_hidden": "none measurable: the step at OFF is as slow",
        "suite_chart": "Bundled replay suite, seconds per backend (best run)",
        "diff_chart": "Two snapshots of {n} events, {c} changed: seconds (best run)",
        "normalise": "normalise both",
        "diff": "diff",
        "suite_total": "whole suite, best / median (s)",
        "suite_cases": "cases × backends",
        "agree": "all backends agree",
        "diff_found": "differences found / changed",
        "yes": "yes",
        "no": "no",
        "tasks_chart": "Audit tasks per second, by backend and worker processes ({n} tasks each)",
        "claim_chart": "Latency of a successful claim, p50 and p95, in milliseconds",
        "workers": "{n} workers",
        "workers_col": "worker processes",
        "durability": "durability",
        "tasks_per_s": "tasks/s",
        "claim_p50": "claim p50 (ms)",
        "claim_p95": "claim p95 (ms)",
        "claim_max": "claim max (ms)",
        "guard_runtime": "runtime, mode",
        "guard_write": "crash at the framework's write",
        "guard_without": "effects repeated without the guard (charges)",
        "guard_with": "with the guard (charges)",
        "guard_own": (
            "The guard's own writes (intent and result around each effect) add crash "
            "points: {points} for {runtime}, at which {repeated} safe effects ran again, "
            "{never} charges ran twice, and {interrupts} unknown charges were decided."
        ),
        "guard_cost_chart": "One run of the shop graph on SQLite, in microseconds (median of {n})",
        "guard_plain": "{mode}: unguarded",
        "guard_guarded": "{mode}: guarded",
        "guard_per_effect": "guard per effect, {mode} (µs)",
        "guard_x_floor": "guard per effect, {mode}, × floor",
        "guard_appends": "durable writes per guarded effect, {mode}",
        "before": "before",
        "after": "after",
    },
    "zh": {
        "file": "结果文件",
        "machine": "测量环境",
        "cpus": "{n} 个 CPU 核",
        "script": "生成脚本",
        "none": "目前还没有提交任何结果文件。",
        "row": "测量项",
        "median_us": "中位数（µs）",
        "p95_us": "p95（µs）",
        "x_floor": "相对 fsync 下限的倍数",
        "syncs": "每次追加的同步次数",
        "not_measured": "未测量",
        "journal_chart": "持久追加耗时，中位数与 p95，单位微秒（每项 n = {n}）",
        "floor": "write+fsync 下限（中位数）",
        "backend": "后端",
        "p50_ms": "p50（ms）",
        "p95_ms": "p95（ms）",
        "one_writer": "1 个写入方（批次/秒）",
        "eight_writers": "{w} 个写入方（批次/秒）",
        "speedup": "加速比",
        "settings": "服务器持久性设置",
        "skipped": "已跳过：{reason}",
        "latency_chart": "单次追加延迟，p50 与 p95，单位毫秒（n = {n}）",
        "throughput_chart": "吞吐量，每批一条记录：1 个写入方与 {w} 个写入方",
        "p50": "p50",
        "p95": "p95",
        "median": "中位数",
        "generic_intro": "由 `{script}` 测得：{what}",
        "generic_what": "`{name}` 中的数据，原样列出。",
        "generic_chart": "{column}，按测量项",
        "key": "键",
        "value": "值",
        "metric": "指标",
        "aim": "目标",
        "loop_chart": "SQLite FULL 上智能体循环的一步，单位微秒（{r} 次运行的中位数）",
        "loop_floor": "write+fsync 下限（中位数）",
        "loop_effect": "每个外部副作用",
        "loop_step": "每一步（2 个副作用）",
        "loop_off": "每一步，synchronous=OFF",
        "resume_chart": "恢复一次中断的运行，单位毫秒，按运行长度",
        "resume_row": "{n} 步",
        "concurrent_chart": "同一进程中的并发运行：每秒持久的副作用数，按运行数",
        "concurrent_row": "{n} 个运行",
        "concurrent_row_one": "1 个运行",
        "grouped": "SQLite FULL，组提交",
        "ungrouped": "SQLite FULL，每次追加单独提交",
        "memory_journal": "内存日志",
        "concurrent_ratio": "32 个运行：SQLite FULL ÷ 内存日志",
        "langgraph_ratio": "LangGraph SqliteSaver（sync）每单元 ÷ 我们每个副作用",
        "steps": "每次运行的步数",
        "appends": "每步的日志追加次数",
        "fsyncs": "每步的 fsync 调用次数（strace）",
        "x_floor_effect": "每个副作用，相对下限的倍数",
        "x_floor_step": "每一步，相对下限的倍数",
        "sync_share": "一步中花在同步上的时间（µs）",
        "sync_hidden": "测不出来：OFF 下的一步同样慢",
        "suite_chart": "内置回放用例集，各后端耗时（秒，取最好的一次）",
        "diff_chart": "两份各 {n} 个事件的快照，其中 {c} 处改动：耗时（秒，最好的一次）",
        "normalise": "规范化两份快照",
        "diff": "比对",
        "suite_total": "整套用例，最好 / 中位数（秒）",
        "suite_cases": "用例数 × 后端数",
        "agree": "所有后端结果一致",
        "diff_found": "找到的差异 / 实际改动",
        "yes": "是",
        "no": "否",
        "tasks_chart": "审计任务每秒完成数，按后端与工作进程数（每组 {n} 个任务）",
        "claim_chart": "成功认领一个任务的延迟，p50 与 p95，单位毫秒",
        "workers": "{n} 个工作进程",
        "workers_col": "工作进程数",
        "durability": "持久性",
        "tasks_per_s": "任务/秒",
        "claim_p50": "认领 p50（ms）",
        "claim_p95": "认领 p95（ms）",
        "claim_max": "认领最大值（ms）",
        "guard_runtime": "运行时，模式",
        "guard_write": "在框架的第几次写入处崩溃",
        "guard_without": "无防护时重复的副作用（其中扣款）",
        "guard_with": "有防护时（其中扣款）",
        "guard_own": (
            "防护自己的写入（每个副作用前后的意图和结果）会带来更多崩溃点：{runtime} "
            "多出 {points} 个，其中 {repeated} 次是 SAFE 副作用重新执行，重复扣款 {never} 次，"
            "结果未知并经裁定的扣款 {interrupts} 次。"
        ),
        "guard_cost_chart": "商店图在 SQLite 上运行一次的耗时，单位微秒（{n} 次的中位数）",
        "guard_plain": "{mode}：无防护",
        "guard_guarded": "{mode}：有防护",
        "guard_per_effect": "每个受防护副作用的额外耗时，{mode}（µs）",
        "guard_x_floor": "每个受防护副作用的额外耗时，{mode}，相对下限的倍数",
        "guard_appends": "每个受防护副作用的持久化写入次数，{mode}",
        "before": "之前",
        "after": "之后",
    },
}

JOURNAL_ORDER = [
    "floor fsync",
    "floor fdatasync",
    "jsonl",
    "sqlite FULL",
    "sqlite FULL x10",
    "sqlite NORMAL",
    "memory",
]
BACKEND_ORDER = ["memory", "jsonl", "sqlite", "postgres", "redis", "mysql"]


def language(page: Page) -> str:
    """The page's language, from its source path (``zh/…`` or anything else)."""
    return "zh" if page.file.src_uri.split("/", 1)[0] == "zh" else "en"


def result_files(directory: Path = RESULTS) -> list[Path]:
    """The committed result files, sorted by name."""
    return sorted(directory.glob("*.json")) if directory.is_dir() else []


def load(path: Path) -> Any:
    """Read one result file."""
    return json.loads(path.read_text(encoding="utf-8"))


# -- numbers --------------------------------------------------------------------------


def fmt(value: object, digits: int = 3) -> str:
    """A number for a table or a bar label: a few significant digits, no exponent."""
    if value is None:
        return "–"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return str(value)
    magnitude = abs(value)
    if magnitude >= 10 ** (digits - 1) or magnitude == 0:
        return f"{value:,.0f}"
    decimals = digits - 1 - math.floor(math.log10(magnitude))
    return f"{value:,.{decimals}f}"


# -- an SVG bar chart -----------------------------------------------------------------


@dataclass(frozen=True)
class Series:
    """One set of bars: a label and a value per category (``None`` leaves a gap)."""

    label: str
    values: Sequence[float | None]


PALETTE = ["var(--md-primary-fg-color, #009485)", "var(--md-accent-fg-color, #ff9100)", "#7e57c2"]


def _text_width(text: str) -> int:
    """About how wide ``text`` is at the charts' 12 px: CJK characters are full width."""
    return sum(12 if ord(ch) > 0x2E80 else 7 for ch in text)


def bar_chart(
    title: str,
    categories: Sequence[str],
    series: Sequence[Series],
    *,
    reference: tuple[str, float] | None = None,
) -> str:
    """Return a horizontal grouped bar chart as a ``<figure>`` holding inline SVG.

    Text is drawn in ``currentColor``, so the chart follows the light and dark themes.
    """
    right_pad, bar_h, gap, top = 70, 14, 10, 8
    width = 680
    # Room for the longest category label, right-aligned before the bars (a Chinese
    # label is wider than its character count suggests).
    label_width = max(150, 16 + max((_text_width(c) for c in categories), default=0))
    plot_w = width - label_width - right_pad
    group_h = bar_h * len(series) + gap
    legend_h = 22 if len(series) > 1 or reference else 0
    height = top + group_h * len(categories) + legend_h + 6
    values = [v for s in series for v in s.values if v is not None]
    peak = max([*values, reference[1] if reference else 0.0, 0.0]) or 1.0
    scale = plot_w / (peak * 1.05)
    out = [
        '<figure class="steadyloop-chart" markdown="0">',
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="100%" role="img" aria-label="{html.escape(title)}" '
        'style="max-width:680px;font-family:var(--md-text-font-family,sans-serif);font-size:12px">',
        f"<title>{html.escape(title)}</title>",
    ]
    for i, category in enumerate(categories):
        y0 = top + i * group_h
        mid = y0 + bar_h * len(series) / 2
        out.append(
            f'<text x="{label_width - 8}" y="{mid + 4:.1f}" text-anchor="end" '
            f'fill="currentColor">{html.escape(category)}</text>'
        )
        for j, s in enumerate(series):
            value = s.values[i]
            if value is None:
                continue
            y = y0 + j * bar_h
            w = max(value * scale, 1.0)
            out.append(
                f'<rect x="{label_width}" y="{y + 1}" width="{w:.1f}" height="{bar_h - 2}" '
                f'style="fill:{PALETTE[j % len(PALETTE)]}"><title>{html.escape(s.label)}: '
                f"{fmt(value)}</title></rect>"
            )
            out.append(
                f'<text x="{label_width + w + 4:.1f}" y="{y + bar_h - 3}" '
                f'fill="currentColor">{fmt(value)}</text>'
            )
    plot_bottom = top + group_h * len(categories) - gap / 2
    out.append(
        f'<line x1="{label_width}" y1="{top}" x2="{label_width}" y2="{plot_bottom}" '
        'stroke="currentColor" stroke-opacity="0.4"/>'
    )
    if reference is not None:
        x = label_width + reference[1] * scale
        out.append(
            f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{plot_bottom}" '
            'stroke="currentColor" stroke-dasharray="4 3"/>'
        )
    if legend_h:
        y = height - 12
        x = label_width
        for j, s in enumerate(series if len(series) > 1 else []):
            out.append(
                f'<rect x="{x}" y="{y - 9}" width="10" height="10" '
                f'style="fill:{PALETTE[j % len(PALETTE)]}"/>'
            )
            label = html.escape(s.label)
            out.append(f'<text x="{x + 14}" y="{y}" fill="currentColor">{label}</text>')
            x += 24 + _text_width(s.label)
        if reference is not None:
            out.append(
                f'<line x1="{x}" y1="{y - 4}" x2="{x + 16}" y2="{y - 4}" '
                'stroke="currentColor" stroke-dasharray="4 3"/>'
            )
            out.append(
                f'<text x="{x + 20}" y="{y}" fill="currentColor">'
                f"{html.escape(reference[0])} = {fmt(reference[1])}</text>"
            )
    out += ["</svg>", f"<figcaption>{html.escape(title)}</figcaption>", "</figure>"]
    return "\n".join(out) + "\n"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table; pipes in cells are escaped."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |"]
    lines.append("|" + "|".join("---" for _ in header) + "|")
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def ordered(keys: Sequence[str], preferred: Sequence[str]) -> list[str]:
    """``keys`` in the preferred order first, then the rest in their own order."""
    return [k for k in preferred if k in keys] + [k for k in keys if k not in preferred]


# -- renderers of known result files --------------------------------------------------


def render_journal(data: Mapping[str, Any], lang: str) -> str:
    """``journal.json``: durable append cost next to the write+fsync floor."""
    t = LABELS[lang]
    rows: Mapping[str, Mapping[str, float]] = data["rows"]
    names = ordered(list(rows), JOURNAL_ORDER)
    syncs: Mapping[str, float | None] = data.get("syncs_per_append", {})
    floor = rows.get("floor fsync", {}).get("median_us")
    chart = bar_chart(
        t["journal_chart"].format(n=data.get("n", "?")),
        names,
        [
            Series(t["median"], [rows[n].get("median_us") for n in names]),
            Series(t["p95"], [rows[n].get("p95_us") for n in names]),
        ],
        reference=(t["floor"], floor) if floor else None,
    )
    body = []
    for n in names:
        r = rows[n]
        if n in syncs:
            s = syncs[n]
            shown = t["not_measured"] if s is None else fmt(s)
        else:
            shown = "–"
        body.append(
            [f"`{n}`", fmt(r.get("median_us")), fmt(r.get("p95_us")), fmt(r.get("x_floor")), shown]
        )
    header = [t["row"], t["median_us"], t["p95_us"], t["x_floor"], t["syncs"]]
    return chart + "\n" + table(header, body)


def render_backends(data: Mapping[str, Any], lang: str) -> str:
    """``backends.json``: latency and 1-vs-N-writer throughput of every backend."""
    t = LABELS[lang]
    results: Mapping[str, Mapping[str, Any]] = data["results"]
    params = data.get("parameters", {})
    writers = params.get("writers", "N")
    names = ordered(list(results), BACKEND_ORDER)
    measured = [n for n in names if "skipped" not in results[n]]
    latency = [results[n].get("latency_ms", {}) for n in measured]
    out = [
        bar_chart(
            t["latency_chart"].format(n=params.get("n", "?")),
            measured,
            [
                Series(t["p50"], [lat.get("p50") for lat in latency]),
                Series(t["p95"], [lat.get("p95") for lat in latency]),
            ],
        ),
        bar_chart(
            t["throughput_chart"].format(w=writers),
            measured,
            [
                Series(t["one_writer"], [results[n].get("one_writer_per_s") for n in measured]),
                Series(
                    t["eight_writers"].format(w=writers),
                    [results[n].get("eight_writers_per_s") for n in measured],
                ),
            ],
        ),
    ]
    body = []
    for n in names:
        r = results[n]
        if "skipped" in r:
            body.append([f"`{n}`", t["skipped"].format(reason=r["skipped"]), "", "", "", "", ""])
            continue
        lat = r.get("latency_ms", {})
        # One setting per line: the column stays narrow and no value is cut.
        settings = "<br>".join(f"`{k}={v}`" for k, v in sorted(r.get("settings", {}).items()))
        body.append(
            [
                f"`{n}`",
                fmt(lat.get("p50")),
                fmt(lat.get("p95")),
                fmt(r.get("one_writer_per_s")),
                fmt(r.get("eight_writers_per_s")),
                fmt(r.get("speedup")),
                settings or "–",
            ]
        )
    header = [
        t["backend"],
        t["p50_ms"],
        t["p95_ms"],
        t["one_writer"],
        t["eight_writers"].format(w=writers),
        t["speedup"],
        t["settings"],
    ]
    return "\n".join(out) + "\n" + table(header, body)


def render_loop(data: Mapping[str, Any], lang: str) -> str:
    """``loop.json``: the cost of one loop step next to the floor, and resume time."""
    t = LABELS[lang]
    step: Mapping[str, Any] = data["step"]
    floor = data.get("floor_fsync", {}).get("median_us")
    bars = [
        (t["loop_floor"], floor),
        (t["loop_effect"], step.get("per_effect_us")),
        (t["loop_step"], step.get("median_of_runs_us")),
        (t["loop_off"], step.get("synchronous_off_us")),
    ]
    out = [
        bar_chart(
            t["loop_chart"].format(r=data.get("repeats", "?")),
            [b[0] for b in bars],
            [Series("µs", [b[1] for b in bars])],
        )
    ]
    resume: Mapping[str, float] = data.get("resume_ms", {})
    if resume:
        lengths = sorted(resume, key=int)
        out.append(
            bar_chart(
                t["resume_chart"],
                [t["resume_row"].format(n=f"{int(n):,}") for n in lengths],
                [Series("ms", [resume[n] for n in lengths])],
            )
        )
    curve: Sequence[Mapping[str, Any]] = data.get("concurrent", {}).get("curve", [])
    if curve:
        out.append(
            bar_chart(
                t["concurrent_chart"],
                [
                    t["concurrent_row_one" if point["runs"] == 1 else "concurrent_row"].format(
                        n=point["runs"]
                    )
                    for point in curve
                ],
                [
                    Series(t["grouped"], [p.get("sqlite_full_effects_per_s") for p in curve]),
                    Series(
                        t["ungrouped"],
                        [p.get("sqlite_full_ungrouped_effects_per_s") for p in curve],
                    ),
                    Series(t["memory_journal"], [p.get("memory_effects_per_s") for p in curve]),
                ],
            )
        )
    peer = data.get("peers", {}).get("langgraph_sqlite_sync", {}).get("per_unit_us")
    rows = [
        [t["steps"], fmt(data.get("steps"))],
        [t["appends"], fmt(data.get("appends_per_step"))],
        [t["fsyncs"], fmt(data.get("fsync_syscalls_per_step"))],
        [t["x_floor_effect"], fmt(step.get("per_effect_x_floor_median"))],
        [t["x_floor_step"], fmt(step.get("x_floor_median"))],
        [t["sync_share"], _sync_share(step.get("sync_share_us"), t)],
        [t["concurrent_ratio"], fmt(data.get("concurrent", {}).get("ratio"))],
        [
            t["langgraph_ratio"],
            fmt(peer / step["per_effect_us"] if peer and step.get("per_effect_us") else None),
        ],
    ]
    return "\n".join(out) + "\n" + table([t["metric"], t["value"]], rows)


def _sync_share(value: float | None, t: Mapping[str, str]) -> str:
    """The syncs' share of a step: FULL minus OFF, which noise can make negative."""
    if value is not None and value <= 0:
        return t["sync_hidden"]
    return fmt(value)


def render_replay(data: Mapping[str, Any], lang: str) -> str:
    """``replay.json``: the bundled suite per backend, and the diff engine at scale."""
    t = LABELS[lang]
    suite: Mapping[str, Any] = data["suite"]
    per_backend: Mapping[str, float] = suite.get("per_backend_seconds", {})
    names = ordered(list(per_backend), BACKEND_ORDER)
    out = [
        bar_chart(
            t["suite_chart"],
            names,
            [Series("s", [per_backend[n] for n in names])],
        )
    ]
    d: Mapping[str, Any] = data.get("diff", {})
    if d:
        out.append(
            bar_chart(
                t["diff_chart"].format(
                    n=fmt(d.get("events_per_snapshot")), c=fmt(d.get("changed_events"))
                ),
                [t["normalise"], t["diff"]],
                [Series("s", [d.get("normalise_both_best_seconds"), d.get("diff_best_seconds")])],
            )
        )
    backends = suite.get("backends", [])
    agree = suite.get("all_agree")
    rows = [
        [
            t["suite_total"],
            f"{fmt(suite.get('best_seconds'))} / {fmt(suite.get('median_seconds'))}",
            fmt(suite.get("aim_seconds")),
        ],
        [t["suite_cases"], f"{fmt(suite.get('cases'))} × {len(backends)}", "–"],
        [t["agree"], t["yes"] if agree else t["no"], "–"],
    ]
    if d:
        rows.append(
            [
                f"{t['diff']}, best / median (s)" if lang == "en" else "比对，最好 / 中位数（秒）",
                f"{fmt(d.get('diff_best_seconds'))} / {fmt(d.get('diff_median_seconds'))}",
                fmt(d.get("aim_seconds")),
            ]
        )
        if d.get("normalise_and_diff_best_seconds") is not None:
            rows.append(
                [
                    "normalise both + diff, best (s)"
                    if lang == "en"
                    else "规范化两份快照 + 比对，最好（秒）",
                    fmt(d.get("normalise_and_diff_best_seconds")),
                    fmt(d.get("aim_seconds")),
                ]
            )
        rows.append(
            [
                t["diff_found"],
                f"{fmt(d.get('differences_found'))} / {fmt(d.get('changed_events'))}",
                "–",
            ]
        )
    return "\n".join(out) + "\n" + table([t["metric"], t["value"], t["aim"]], rows)


def render_audit(data: Mapping[str, Any], lang: str) -> str:
    """``audit.json``: claim latency and tasks/s with 1, 2 and 4 worker processes."""
    t = LABELS[lang]
    backends: Mapping[str, Mapping[str, Any]] = data["backends"]
    names = [n for n in backends if "runs" in backends[n]]
    counts = sorted({r["workers"] for n in names for r in backends[n]["runs"]})

    def run(name: str, workers: int) -> Mapping[str, Any]:
        return next((r for r in backends[name]["runs"] if r["workers"] == workers), {})

    out = [
        bar_chart(
            t["tasks_chart"].format(n=data.get("tasks_per_config", "?")),
            names,
            [
                Series(t["workers"].format(n=w), [run(n, w).get("tasks_per_s") for n in names])
                for w in counts
            ],
        )
    ]
    rows_names = [f"{n} × {w}" for n in names for w in counts]
    claims = [run(n, w).get("claim_ms", {}) for n in names for w in counts]
    out.append(
        bar_chart(
            t["claim_chart"],
            rows_names,
            [
                Series(t["p50"], [c.get("p50") for c in claims]),
                Series(t["p95"], [c.get("p95") for c in claims]),
            ],
        )
    )
    body = []
    for n in backends:
        if "runs" not in backends[n]:
            reason = backends[n].get("skipped", "")
            body.append([f"`{n}`", t["skipped"].format(reason=reason), "", "", "", "", ""])
            continue
        for w in counts:
            r = run(n, w)
            c = r.get("claim_ms", {})
            body.append(
                [
                    f"`{n}`",
                    str(backends[n].get("durability", "–")),
                    fmt(w),
                    fmt(r.get("tasks_per_s")),
                    fmt(c.get("p50")),
                    fmt(c.get("p95")),
                    fmt(c.get("max")),
                ]
            )
    header = [
        t["backend"],
        t["durability"],
        t["workers_col"],
        t["tasks_per_s"],
        t["claim_p50"],
        t["claim_p95"],
        t["claim_max"],
    ]
    return "\n".join(out) + "\n" + table(header, body)


def render_guard(data: Mapping[str, Any], lang: str) -> str:
    """``guard.json``: effects repeated per crash point without and with a guard, and its cost."""
    t = LABELS[lang]
    rows = [
        [
            f"{r['framework']}, `{r['mode']}`",
            f"{r['write']} (`{r['label_without_guard']}`), {t[r['side']]}",
            f"{r['repeated_without_guard']} ({r['never_repeated_without_guard']})",
            f"{r['repeated_with_guard']} ({r['never_repeated_with_guard']})",
        ]
        for r in data["matrix"]
    ]
    out = [table([t["guard_runtime"], t["guard_write"], t["guard_without"], t["guard_with"]], rows)]
    for own in data.get("guard_points", []):
        out.append(
            t["guard_own"].format(
                points=own["points"],
                runtime=f"{own['framework']} ({own['mode']})",
                repeated=own["repeated"] - own["never_repeated"],
                never=own["never_repeated"],
                interrupts=own["interrupts"],
            )
        )
    modes = [m for m in ("sync", "async") if m in data]
    floor = data.get("floor_fsync", {}).get("median_us")
    labels = [t["floor"]]
    values = [floor]
    for mode in modes:
        labels += [t["guard_plain"].format(mode=mode), t["guard_guarded"].format(mode=mode)]
        values += [data[mode]["unguarded"]["median_us"], data[mode]["guarded"]["median_us"]]
    out.append(
        bar_chart(
            t["guard_cost_chart"].format(n=data.get("runs", "?")),
            labels,
            [Series("µs", values)],
        )
    )
    cost = []
    for mode in modes:
        row = data[mode]
        cost += [
            [t["guard_appends"].format(mode=mode), fmt(row["appends_per_guarded_effect"])],
            [t["guard_per_effect"].format(mode=mode), fmt(row["guard_us_per_effect"])],
            [t["guard_x_floor"].format(mode=mode), fmt(row["guard_per_effect_x_floor"])],
        ]
    out.append(table([t["metric"], t["value"]], cost))
    return "\n\n".join(out) + "\n"


RENDERERS: dict[str, Callable[[Mapping[str, Any], str], str]] = {
    "audit.json": render_audit,
    "guard.json": render_guard,
    "journal.json": render_journal,
    "backends.json": render_backends,
    "loop.json": render_loop,
    "replay.json": render_replay,
}


def render_known(name: str, data: Any, lang: str) -> str:
    """Draw a file with its own renderer, or generically.

    The generic drawing is used when the file has no renderer, or when its layout no
    longer fits the renderer, so a changed result file never breaks the build.
    """
    renderer = RENDERERS.get(name)
    if renderer is not None:
        try:
            return renderer(data, lang)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            log.info("benchmarks: %s has an unexpected layout (%r); drawn generically", name, exc)
    return render_generic(name, data, lang)


# -- any other result file ------------------------------------------------------------


def _numbers(value: Any, prefix: str = "") -> dict[str, float]:
    """The numeric leaves of a JSON value, by dotted path."""
    out: dict[str, float] = {}
    if isinstance(value, bool):
        return out
    if isinstance(value, int | float):
        out[prefix] = value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            out.update(_numbers(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.update(_numbers(v, f"{prefix}.{i}" if prefix else str(i)))
    return out


_NAME_FIELDS = ("backend", "name", "id", "case", "label", "kind")


def _named_rows(candidate: Any) -> dict[str, Mapping[str, Any]] | None:
    """Rows of a mapping of mappings, or of a list of mappings named by a field of theirs.

    ``[{"backend": "sqlite", "kills": 3}, ...]`` gives the row ``sqlite`` (the list index
    is no name a reader can use); a list without such a field keeps ``#1``, ``#2`` ….
    """
    if isinstance(candidate, Mapping) and candidate:
        if all(isinstance(v, Mapping) for v in candidate.values()):
            return {str(k): v for k, v in candidate.items()}
        return None
    if isinstance(candidate, list) and candidate and all(isinstance(v, Mapping) for v in candidate):
        for field in _NAME_FIELDS:
            names = [v.get(field) for v in candidate]
            if all(isinstance(n, str) for n in names) and len(set(names)) == len(names):
                return {
                    str(n): {k: x for k, x in v.items() if k != field}
                    for n, v in zip(names, candidate, strict=True)
                }
        return {f"#{i}": v for i, v in enumerate(candidate, start=1)}
    return None


def _rows(data: Any) -> dict[str, dict[str, float]] | None:
    """The first rows of the file (see [_named_rows][]) that have numbers in them."""
    if not isinstance(data, Mapping):
        return None
    for key in ("rows", "results", *data.keys()):
        named = _named_rows(data.get(key))
        if named is not None:
            rows = {k: _numbers(v) for k, v in named.items()}
            if any(rows.values()):
                return rows
    return None


def _scalar(value: Any) -> str | None:
    """A leaf shown in a key/value table, or None for a nested value."""
    if isinstance(value, bool):
        return "✓" if value else "✗"
    if isinstance(value, int | float):
        return fmt(value)
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(not isinstance(v, Mapping | list) for v in value):
        return ", ".join(str(v) for v in value) if value else "–"
    return None


def _key_values(mapping: Mapping[str, Any], lang: str) -> str:
    t = LABELS[lang]
    body = [[f"`{k}`", shown] for k, v in mapping.items() if (shown := _scalar(v)) is not None]
    return table([t["key"], t["value"]], body) if body else ""


def _cell(value: Any) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {_cell(v)}" for k, v in value.items()) or "–"
    shown = _scalar(value)
    return shown if shown is not None else json.dumps(value)


def render_generic(name: str, data: Any, lang: str, max_columns: int = 7) -> str:
    """Tables of any result file, and a chart of its first median-like column.

    The first set of rows (a mapping of mappings, or a list of mappings named by a
    field such as ``backend``) gets a chart and a table with a column per measure; the
    file's other parts each get a table of their own under their key: a key/value table
    for a mapping of plain values, a row per entry for a list of mappings. ``machine``
    is left out (the result-file table names it).
    """
    t = LABELS[lang]
    if not isinstance(data, Mapping):
        leaves = list(_numbers(data).items())[:60]
        return table([t["key"], t["value"]], [[f"`{k}`", fmt(v)] for k, v in leaves])
    out: list[str] = []
    rows_key = next(
        (
            k
            for k in ("rows", "results", *data.keys())
            if (named := _named_rows(data.get(k))) is not None
            and any(_numbers(v) for v in named.values())
        ),
        None,
    )
    top = {k: v for k, v in data.items() if k not in {"machine", rows_key}}
    if plain := _key_values(top, lang):
        out.append(plain)
    if rows_key is not None:
        named = _named_rows(data[rows_key]) or {}
        rows = {k: _numbers(v) for k, v in named.items()}
        columns: list[str] = []
        for values in rows.values():
            for column in values:
                if column not in columns:
                    columns.append(column)
        columns = columns[:max_columns]
        # Chart a typical-value column only; counts of unlike things (kills, runs) side
        # by side are no chart.
        chosen = next((c for c in columns if re.search(r"median|p50", c)), None)
        if chosen is not None:
            names = list(rows)
            out.append(
                bar_chart(
                    t["generic_chart"].format(column=chosen),
                    names,
                    [Series(chosen, [rows[n].get(chosen) for n in names])],
                )
            )
        extra = [
            c
            for c in dict.fromkeys(k for v in named.values() for k in v)
            if not any(col == c or col.startswith(f"{c}.") for col in columns)
        ]
        body = [
            [
                f"`{n}`",
                *(fmt(rows[n].get(c)) for c in columns),
                *(_cell(v.get(c, "–")) for c in extra),
            ]
            for n, v in named.items()
        ]
        header = [t["row"], *(f"`{c}`" for c in [*columns, *extra])]
        if len(body) <= 4 < len(header) - 3:
            # Few rows, many measures: a row per measure reads better than a wide table.
            header, body = (
                [t["metric"], *(r[0] for r in body)],
                [[h, *(r[i] for r in body)] for i, h in enumerate(header) if i],
            )
        out.append(table(header, body))
    for key, value in top.items():
        if _scalar(value) is not None:
            continue
        if isinstance(value, Mapping) and all(_scalar(v) is not None for v in value.values()):
            out.append(f"`{key}`\n\n" + _key_values(value, lang))
        elif (named := _named_rows(value)) is not None:
            cols = list(dict.fromkeys(k for v in named.values() for k in v))
            body = [[f"`{n}`", *(_cell(v.get(c, "–")) for c in cols)] for n, v in named.items()]
            out.append(f"`{key}`\n\n" + table([t["row"], *(f"`{c}`" for c in cols)], body))
        else:
            out.append(f"`{key}`: `{json.dumps(value, ensure_ascii=False)}`\n")
    return "\n".join(out)


# -- the page -------------------------------------------------------------------------


def script_for(path: Path) -> Path | None:
    """The benchmark script that writes a result file, by the project's naming."""
    candidate = ROOT / "benchmarks" / f"bench_{path.stem}.py"
    return candidate if candidate.is_file() else None


def _first_docstring_line(path: Path) -> str:
    import ast

    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def shown(path: Path) -> str:
    """A path as the page shows it: relative to the project when it is inside it."""
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name


def describe_machine(data: Any, lang: str) -> str:
    """Where a result was measured, from the file's ``machine`` entry."""
    if not isinstance(data, Mapping):
        return "–"
    machine = data.get("machine")
    if not isinstance(machine, Mapping):
        machine = data  # some benchmarks record platform and python at the top level
    parts = []
    if "cpus" in machine:
        parts.append(LABELS[lang]["cpus"].format(n=machine["cpus"]))
    parts += [f"`{machine[k]}`" for k in ("platform", "python") if k in machine]
    return ", ".join(parts) or "–"


def sources(directory: Path, lang: str) -> str:
    """The list of result files this build uses."""
    t = LABELS[lang]
    files = result_files(directory)
    if not files:
        return t["none"] + "\n"
    rows = []
    for path in files:
        script = script_for(path)
        rows.append(
            [
                f"`{shown(path)}`",
                f"`{shown(script)}`" if script else "–",
                describe_machine(load(path), lang),
            ]
        )
    return table([t["file"], t["script"], t["machine"]], rows)


def section(path: Path, lang: str) -> str:
    """A whole section for a result file no block of the page names."""
    t = LABELS[lang]
    data = load(path)
    script = script_for(path)
    what = data.get("what") if isinstance(data, Mapping) else None
    if script is not None:
        intro = t["generic_intro"].format(
            script=shown(script),
            what=what or _first_docstring_line(script),
        )
    else:
        intro = t["generic_what"].format(name=path.name)
    anchor = "bench-" + re.sub(r"[^a-z0-9]+", "-", path.stem.lower()).strip("-")
    body = render_known(path.name, data, lang)
    return f"## `{path.name}` {{#{anchor}}}\n\n{intro}\n\n{body}"


def chart(name: str, lang: str, directory: Path = RESULTS) -> str:
    """Charts and a table for one result file (empty when it does not exist)."""
    path = directory / name
    if not path.is_file():
        return ""
    return render_known(name, load(path), lang)


def render_page(markdown: str, lang: str, directory: Path = RESULTS) -> tuple[str, list[str]]:
    """Apply every benchmark marker of a page; return the text and the files used."""
    present = {p.name for p in result_files(directory)}
    used: list[str] = []
    named = {m["name"] for m in BLOCK.finditer(markdown)}

    def keep_or_drop(match: re.Match[str]) -> str:
        return match["body"] if match["name"] in present else ""

    markdown = BLOCK.sub(keep_or_drop, markdown)

    def draw(match: re.Match[str]) -> str:
        used.append(match["name"])
        return chart(match["name"], lang, directory)

    markdown = CHART.sub(draw, markdown)

    def others(_: re.Match[str]) -> str:
        rest = [directory / n for n in sorted(present - named)]
        used.extend(p.name for p in rest)
        return "\n".join(section(p, lang) for p in rest)

    markdown = OTHERS.sub(others, markdown)
    markdown = SOURCES.sub(lambda m: sources(directory, lang), markdown)
    return markdown, sorted(set(used) & present)


def on_page_markdown(markdown: str, page: Page, **kwargs: Any) -> str:
    """Replace the benchmark markers of a Markdown page."""
    if page.file.src_uri.endswith(".ipynb") or "<!-- benchmark-" not in markdown:
        return markdown
    try:
        text, used = render_page(markdown, language(page))
    except (OSError, ValueError, KeyError, TypeError) as exc:  # a bad result file must show
        log.warning("%s: cannot draw the benchmark results: %r", page.file.src_uri, exc)
        return markdown
    log.info("%s: benchmark results from %s", page.file.src_uri, ", ".join(used) or "no file")
    return text
