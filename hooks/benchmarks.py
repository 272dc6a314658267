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

Every figure names the result file it comes from, the date it was measured and the
load average of the machine at the time (the ``measured`` entry that
``benchmarks/_measured.py`` writes into every result).

Strict: a figure is drawn from the fields it reads, or not at all. A result file that
lacks a field its renderer reads (or its ``measured`` entry), a ``benchmark-chart`` marker
for a file that does not exist, or a file that is not valid JSON fails the build, strict
or not, with an error that names the page, the result file and the field. Nothing is
drawn empty and nothing falls back to another layout.

Labels follow the page's language (``en/…`` or ``zh/…``).
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

from mkdocs.exceptions import PluginError
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
        "date": "measured",
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
        "repeats_shape": "shape",
        "repeats_points": "crash points: charge repeats without the guard → with it",
        "repeats_aimed": "{n} aimed kills on {backend}: repeats without → with (lost with)",
        "repeats_cell": (
            "{without} at {points_without} of {points} points → {with_} at {points_with} of "
            "{points_guarded}"
        ),
        "repeats_kill_cell": "{without} → {with_} ({lost})",
        "pydantic_points": "crash points with a charge repeat: without the guard → with it",
        "pydantic_points_cell": "{without} of {points} → {with_} of {points_guarded}",
        "pydantic_kills": "{n} aimed kills on SQLite: repeats without → with (lost with)",
        "pydantic_kills_pg": (
            "{n} aimed kills, the guard's journal on PostgreSQL: repeats with the guard (lost)"
        ),
        "pydantic_pg_cell": "{with_} ({lost})",
        "pydantic_mode_alone": "Pydantic AI alone",
        "pydantic_mode_dbos": "Pydantic AI on DBOS",
        "repeats_versions": (
            "Measured with {versions}; each kill landed within {ms} ms after a charge."
        ),
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
        "from": "From `{file}`",
        "measured_on": "measured {date}",
        "date_unknown": "date not recorded (the file was committed on {committed})",
        "date_unknown_bare": "date not recorded",
        "load": "load average {start} at the start, {end} at the end (1 min, {cpus})",
        "load_unknown": "load average not recorded",
        "audit_row": "{backend}, {n} workers",
        "audit_row_one": "{backend}, 1 worker",
        "audit_tasks_chart": (
            "Audit tasks per second, before and after, by backend and worker processes "
            "({n} tasks each)"
        ),
        "audit_claim_chart": "Submit to claim, after, p50 and p95, in milliseconds ({n} submits)",
        "audit_before_after": "before: `{before}`; after: `{after}`",
        "tasks_per_s_ba": "tasks/s, before → after",
        "plans_ba": "queue plans per task, before → after",
        "claim_p50_ba": "submit→claim p50 (ms), before → after",
        "claim_p95_ba": "submit→claim p95 (ms), before → after",
        "loaded": (
            "The machine was busy during this run (1-minute load average above half its "
            "cores): the figures are slower than on a quiet machine."
        ),
        "docs_chart": "Each notebook's execution in the cold build, in seconds (run in parallel)",
        "docs_cold": "cold `mkdocs build --strict`, both languages, empty notebook cache (s)",
        "docs_warm": "the same build again, notebooks from the cache (s)",
        "docs_nbmake": "notebook tests after the build (s)",
        "docs_nbmake_cold": (
            "`pytest notebooks` on an empty cache: nbmake executes every notebook once (s)"
        ),
        "docs_render": "`mkdocs build --strict` after it, both languages, executing none (s)",
        "docs_nbmake_warm": "`pytest notebooks` again: nothing executed (s)",
        "docs_nbmake_parallel": (
            "`pytest notebooks` on an empty cache, {n} at a time: nbmake executes every "
            "notebook once (s)"
        ),
        "docs_cold_total": "cold strict build: the notebooks, then `mkdocs build --strict` (s)",
        "docs_slowest": "slowest notebook: `{name}` (s)",
        "docs_notebook_aim": "aim per notebook",
        "docs_wall": "wall time",
        "docs_cpu": "CPU time",
        "docs_chart_cpu": (
            "Each notebook in the cold build, in seconds: wall time ({n} at a time) and CPU "
            "time (its pytest process and kernel)"
        ),
        "docs_cpu_total": (
            "the same work in CPU time, per core: the notebooks' {total} s over {n} cores, "
            "plus the build's {build} s (s)"
        ),
        "docs_covered": "notebooks executed in the measured build",
        "docs_partial": (
            "This result covers {n} of the {total} notebooks in `notebooks/`; it did not "
            "execute {missing}. Its build times are those of that smaller build, not of "
            "today's full build with every notebook."
        ),
        "docs_full": "This result covers all {total} notebooks in `notebooks/`.",
        "docs_partial_title": "Not the whole build",
        "loaded_title": "A busy machine",
        "soak_forked": "forked from the soaking process",
        "soak_spawned interpreters": "fresh interpreters",
        "soak_settings": (
            "Each backend was soaked for {duration} s: runs of {steps} steps, the children "
            "{children}, each killed with SIGKILL after at most {delay} s (seed `{seed}`)."
        ),
        "soak_ok": "Every check held on every backend.",
        "soak_failed": "A check failed: see the failures row.",
        "soak_seconds": "seconds soaked",
        "soak_children": "child processes started",
        "soak_kills": "SIGKILLs",
        "soak_chart": "SIGKILLs survived, by backend",
        "chaos_intro": "{tasks} tasks on {workers} worker processes per fault.",
        "chaos_ok": "Every promise held under every fault.",
        "chaos_failed": "A promise broke under a fault: see the rows that are not 0.",
        "chaos_chart": "Acknowledged trail writes under each fault (every one survived)",
        "chaos_acked": "acknowledged trail writes",
        "chaos_seconds": "seconds",
        "chaos_not_once": "tasks not terminal exactly once",
        "chaos_wrong": "tasks with another outcome than without faults",
        "chaos_overlaps": "moments two live verifies of one task ran",
        "chaos_orphans": "orphaned verify processes",
        "chaos_dead": "workers dead of the fault",
        "chaos_lost": "acknowledged writes lost",
        "chaos_writer_kills": "journal writer SIGKILLed",
        "chaos_writer_lost": "its acknowledged appends lost / stored twice / of",
        "chaos_events": "what the fault did",
        "chaos_fault_latency": "latency and stalls",
        "chaos_fault_blackhole": "blackholed route",
        "chaos_fault_postgres-restart": "PostgreSQL restarted",
        "chaos_fault_postgres-sigkill": "postmaster SIGKILLed",
        "chaos_fault_mariadb-restart": "MariaDB restarted",
        "soak_runs": "runs completed (steps)",
        "soak_unknown": "children stopped at RESUME_STATE_UNKNOWN",
        "soak_resolved": "resolved as happened / not happened",
        "soak_lives": "most lives of one run",
        "soak_failures": "failures",
        "soak_none": "none",
        "cpu_chart": (
            "Instructions per agent-loop step, in thousands (callgrind; N = {n} and 3N steps)"
        ),
        "cpu_memory": "Steadyloop, memory journal",
        "cpu_sqlite": "Steadyloop, SQLite FULL",
        "cpu_langgraph": "LangGraph {version}, InMemorySaver",
        "cpu_thousands": "thousand instructions",
        "cpu_goal": "goal: a step on the memory journal (thousand instructions)",
        "cpu_ratio": "LangGraph ÷ Steadyloop (memory journal)",
        "cpu_calls": "Python function calls per step, memory journal (cProfile)",
        "cpu_runs": "counts of each workload (the lowest is shown)",
        "cpu_spread": "spread between counts, memory journal (instructions per step)",
        "cpu_function": "function (CPython or library, self cost)",
        "cpu_per_step": "instructions per step",
        "cpu_top": "Where a step on the memory journal goes, by C function (self cost per step)",
        "durable_chart": (
            "One run alone: what storage adds to an effect, in microseconds (median of {r} rounds)"
        ),
        "durable_floor": "write+fsync floor",
        "durable_journal": "journal",
        "durable_per_effect": "per effect (µs)",
        "durable_part": "durable part (µs)",
        "durable_x_floor": "durable part × floor",
        "durable_x_rounds": "× floor, median of rounds",
        "durable_statements": "statements per append",
        "durable_commits": "commits per append",
        "durable_syncs": "fsync calls per append (strace)",
        "durable_split": "of the durable part: the sync / the rest (µs)",
        "durable_cc_chart": "Runs at once in one process: effects/s ÷ the memory journal's",
        "durable_goal": "goal",
        "durable_runs": "runs",
        "durable_cc_memory": "memory (effects/s)",
        "durable_cc_cell": "{rate} ({ratio})",
        "durable_cc_commits": "SQLite commits / statements per append",
        "durable_load": "load average",
        "durable_kind_memory": "memory",
        "durable_kind_sqlite": "SQLite FULL",
        "durable_kind_sqlite_before": "SQLite FULL, plan per append (before)",
        "durable_kind_sqlite_off": "SQLite OFF (not durable)",
        "durable_kind_jsonl": "JSONL",
        "durable_kind_jsonl_before": "JSONL, records encoded twice (before)",
        "durable_kind_jsonl_unsynced": "JSONL without fsync (not durable)",
        "durable_kind_postgresql": "PostgreSQL (server)",
        "snap_chart": "Resume of a summarised run, in milliseconds (median)",
        "snap_row": "{n} steps",
        "snap_row_scoped": "{n} steps, {o} other sessions' state",
        "snap_row_bare": "{n} steps, {o} other sessions' state, no state snapshots",
        "snap_case": "resume",
        "snap_ms": "ms (median)",
        "snap_reads": "records read",
        "snap_ratio": "slowest ÷ fastest, with state snapshots (goal ≤ 2)",
        "snap_bytes": "latest session snapshot, {n} random-id events (bytes)",
        "snap_bytes_ratio": "10,000 ÷ 1,000 events (goal ≤ 2)",
        "scale_chart": "One run in a growing journal, in milliseconds",
        "scale_row": "{backend}, {n} records",
        "scale_resume": "resume of one run",
        "scale_show": "runs show",
        "scale_metric": "{backend}, records in the journal",
        "scale_runs": "runs",
        "scale_bytes": "bytes on disk per record",
        "scale_list": "runs list, first page of 50 (ms)",
        "scale_show_ms": "runs show (ms)",
        "scale_resume_ms": "resume of one run (ms)",
        "scale_doctor": "journal doctor (records/s)",
        "scale_copy": "journal copy, comparison included (records/s)",
        "scale_prune": "journal prune of every finished run (records/s)",
    },
    "zh": {
        "file": "结果文件",
        "date": "测量日期",
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
        "repeats_shape": "形态",
        "repeats_points": "崩溃点：重复扣款次数，无防护 → 有防护",
        "repeats_aimed": "{backend} 上 {n} 次定点杀进程：重复次数，无防护 → 有防护（有防护时丢失）",
        "repeats_cell": (
            "{without}（{points} 个点中的 {points_without} 个）→ "
            "{with_}（{points_guarded} 个点中的 {points_with} 个）"
        ),
        "repeats_kill_cell": "{without} → {with_}（{lost}）",
        "pydantic_points": "出现重复扣款的崩溃点：无防护 → 有防护",
        "pydantic_points_cell": "{points} 个中的 {without} 个 → {points_guarded} 个中的 {with_} 个",
        "pydantic_kills": "SQLite 上 {n} 次定点杀进程：重复次数，无防护 → 有防护（有防护时丢失）",
        "pydantic_kills_pg": (
            "防护日志在 PostgreSQL 上时 {n} 次定点杀进程：有防护时的重复次数（丢失）"
        ),
        "pydantic_pg_cell": "{with_}（{lost}）",
        "pydantic_mode_alone": "单独使用 Pydantic AI",
        "pydantic_mode_dbos": "Pydantic AI 运行在 DBOS 上",
        "repeats_versions": (
            "测量所用版本：{versions}；每次 SIGKILL 都落在一次扣款之后 {ms} ms 以内。"
        ),
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
        "from": "数据来自 `{file}`",
        "measured_on": "测量于 {date}",
        "date_unknown": "未记录测量日期（该文件提交于 {committed}）",
        "date_unknown_bare": "未记录测量日期",
        "load": "开始时平均负载 {start}，结束时 {end}（1 分钟，{cpus}）",
        "load_unknown": "未记录平均负载",
        "audit_row": "{backend}，{n} 个工作进程",
        "audit_row_one": "{backend}，1 个工作进程",
        "audit_tasks_chart": (
            "审计任务每秒完成数，改动之前与之后，按后端与工作进程数（每组 {n} 个任务）"
        ),
        "audit_claim_chart": "从提交到认领的延迟，改动之后，p50 与 p95，单位毫秒（{n} 次提交）",
        "audit_before_after": "之前：`{before}`；之后：`{after}`",
        "tasks_per_s_ba": "任务/秒，之前 → 之后",
        "plans_ba": "每个任务的队列事务数，之前 → 之后",
        "claim_p50_ba": "提交→认领 p50（ms），之前 → 之后",
        "claim_p95_ba": "提交→认领 p95（ms），之前 → 之后",
        "loaded": "这次运行时机器较忙（1 分钟平均负载超过核数的一半），数据比空闲机器上慢。",
        "docs_chart": "冷构建中每个笔记本的执行耗时，单位秒（并行执行）",
        "docs_cold": "冷构建 `mkdocs build --strict`，两种语言，笔记本缓存为空（秒）",
        "docs_warm": "再构建一次，笔记本取自缓存（秒）",
        "docs_nbmake": "构建之后运行笔记本测试（秒）",
        "docs_nbmake_cold": (
            "缓存为空时运行 `pytest notebooks`：nbmake 把每个笔记本各执行一次（秒）"
        ),
        "docs_render": "随后 `mkdocs build --strict`，两种语言，不执行任何笔记本（秒）",
        "docs_nbmake_warm": "再运行一次 `pytest notebooks`：什么也不执行（秒）",
        "docs_nbmake_parallel": (
            "缓存为空时运行 `pytest notebooks`，同时跑 {n} 个：nbmake 把每个笔记本各执行一次（秒）"
        ),
        "docs_cold_total": "冷构建：先执行笔记本，再 `mkdocs build --strict`（秒）",
        "docs_slowest": "最慢的笔记本：`{name}`（秒）",
        "docs_notebook_aim": "单个笔记本的目标",
        "docs_wall": "墙钟时间",
        "docs_cpu": "CPU 时间",
        "docs_chart_cpu": (
            "冷构建中每个笔记本的耗时，单位秒：墙钟时间（同时跑 {n} 个）和 CPU 时间"
            "（它的 pytest 进程和内核）"
        ),
        "docs_cpu_total": (
            "同样的工作按 CPU 时间折算到每个核：笔记本的 {total} 秒分摊到 {n} 个核，"
            "加上构建的 {build} 秒（秒）"
        ),
        "docs_covered": "被测构建中执行的笔记本",
        "docs_partial": (
            "这份结果只覆盖 `notebooks/` 中 {total} 个笔记本里的 {n} 个，没有执行 {missing}。"
            "其中的构建耗时属于那次较小的构建，不是今天执行全部笔记本的完整构建。"
        ),
        "docs_full": "这份结果覆盖 `notebooks/` 中全部 {total} 个笔记本。",
        "docs_partial_title": "不是完整构建",
        "loaded_title": "机器较忙",
        "soak_forked": "从压测进程 fork 出来的",
        "soak_spawned interpreters": "新启动的解释器",
        "soak_settings": (
            "每个后端各压测 {duration} 秒：每次运行 {steps} 步，子进程是{children}，"
            "每个子进程最多运行 {delay} 秒就被 SIGKILL 杀掉（随机种子 `{seed}`）。"
        ),
        "soak_ok": "所有后端的所有检查都成立。",
        "soak_failed": "有检查失败：见“失败”一行。",
        "soak_seconds": "压测秒数",
        "soak_children": "启动的子进程数",
        "soak_kills": "SIGKILL 次数",
        "soak_chart": "各后端经受的 SIGKILL 次数",
        "chaos_intro": "每种故障下 {tasks} 个任务、{workers} 个 worker 进程。",
        "chaos_ok": "每种故障下各项保证都成立。",
        "chaos_failed": "某种故障下有保证被打破：见不为 0 的行。",
        "chaos_chart": "各种故障下已确认的轨迹写入（全部保留下来）",
        "chaos_acked": "已确认的轨迹写入",
        "chaos_seconds": "秒",
        "chaos_not_once": "没有恰好结束一次的任务",
        "chaos_wrong": "结果与无故障时不同的任务",
        "chaos_overlaps": "同一任务有两个校验同时运行的时刻",
        "chaos_orphans": "成为孤儿的校验进程",
        "chaos_dead": "因故障而死的 worker",
        "chaos_lost": "丢失的已确认写入",
        "chaos_writer_kills": "日志写入进程被 SIGKILL 的次数",
        "chaos_writer_lost": "其已确认追加：丢失 / 重复存储 / 总数",
        "chaos_events": "故障做了什么",
        "chaos_fault_latency": "延迟与停顿",
        "chaos_fault_blackhole": "路由黑洞",
        "chaos_fault_postgres-restart": "PostgreSQL 重启",
        "chaos_fault_postgres-sigkill": "postmaster 被 SIGKILL",
        "chaos_fault_mariadb-restart": "MariaDB 重启",
        "soak_runs": "完成的运行（步数）",
        "soak_unknown": "停在 RESUME_STATE_UNKNOWN 的子进程",
        "soak_resolved": "裁定为已发生 / 未发生",
        "soak_lives": "单次运行最多经历的进程数",
        "soak_failures": "失败",
        "soak_none": "无",
        "cpu_chart": "智能体循环每一步执行的指令数，单位千条（callgrind；N = {n} 步与 3N 步）",
        "cpu_memory": "Steadyloop，内存日志",
        "cpu_sqlite": "Steadyloop，SQLite FULL",
        "cpu_langgraph": "LangGraph {version}，InMemorySaver",
        "cpu_thousands": "千条指令",
        "cpu_goal": "目标：内存日志上的一步（千条指令）",
        "cpu_ratio": "LangGraph ÷ Steadyloop（内存日志）",
        "cpu_calls": "每步的 Python 函数调用次数，内存日志（cProfile）",
        "cpu_runs": "每个负载计数的次数（取最低值）",
        "cpu_spread": "内存日志上各次计数之差（每步指令数）",
        "cpu_function": "函数（CPython 或库，自身开销）",
        "cpu_per_step": "每步指令数",
        "cpu_top": "内存日志上一步的指令花在哪里，按 C 函数（每步的自身开销）",
        "durable_chart": "单个运行：存储给每个副作用增加的耗时，单位微秒（{r} 轮的中位数）",
        "durable_floor": "write+fsync 下限",
        "durable_journal": "日志",
        "durable_per_effect": "每个副作用（µs）",
        "durable_part": "持久化部分（µs）",
        "durable_x_floor": "持久化部分 × 下限",
        "durable_x_rounds": "× 下限，各轮比值的中位数",
        "durable_statements": "每次追加的语句数",
        "durable_commits": "每次追加的提交数",
        "durable_syncs": "每次追加的 fsync 调用数（strace）",
        "durable_split": "持久化部分中：同步 / 其余（µs）",
        "durable_cc_chart": "同一进程中的并发运行：每秒副作用数 ÷ 内存日志的每秒副作用数",
        "durable_goal": "目标",
        "durable_runs": "运行数",
        "durable_cc_memory": "内存（副作用/秒）",
        "durable_cc_cell": "{rate}（{ratio}）",
        "durable_cc_commits": "SQLite 每次追加的提交数 / 语句数",
        "durable_load": "负载均值",
        "durable_kind_memory": "内存",
        "durable_kind_sqlite": "SQLite FULL",
        "durable_kind_sqlite_before": "SQLite FULL，每次追加各跑一遍计划（改动前）",
        "durable_kind_sqlite_off": "SQLite OFF（不持久）",
        "durable_kind_jsonl": "JSONL",
        "durable_kind_jsonl_before": "JSONL，记录编码两遍（改动前）",
        "durable_kind_jsonl_unsynced": "JSONL，不做 fsync（不持久）",
        "durable_kind_postgresql": "PostgreSQL（服务器）",
        "snap_chart": "恢复一个做过摘要的运行，单位毫秒（中位数）",
        "snap_row": "{n} 步",
        "snap_row_scoped": "{n} 步，另有 {o} 个会话的状态",
        "snap_row_bare": "{n} 步，另有 {o} 个会话的状态，不写状态快照",
        "snap_case": "恢复",
        "snap_ms": "毫秒（中位数）",
        "snap_reads": "读取的记录数",
        "snap_ratio": "最慢 ÷ 最快，有状态快照（目标 ≤ 2）",
        "snap_bytes": "最新的会话快照，{n} 个随机 id 的事件（字节）",
        "snap_bytes_ratio": "10,000 ÷ 1,000 个事件（目标 ≤ 2）",
        "scale_chart": "日志不断变大时的单个运行，单位毫秒",
        "scale_row": "{backend}，{n} 条记录",
        "scale_resume": "恢复一个运行",
        "scale_show": "runs show",
        "scale_metric": "{backend}，日志中的记录数",
        "scale_runs": "运行数",
        "scale_bytes": "每条记录占用的磁盘字节数",
        "scale_list": "runs list 第一页，50 个运行（毫秒）",
        "scale_show_ms": "runs show（毫秒）",
        "scale_resume_ms": "恢复一个运行（毫秒）",
        "scale_doctor": "journal doctor（记录/秒）",
        "scale_copy": "journal copy，含比较（记录/秒）",
        "scale_prune": "journal prune 删除每个已结束的运行（记录/秒）",
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


# -- strict reading of a result file ----------------------------------------------------


class FigureError(Exception):
    """A figure cannot be drawn: its result file lacks a field, or the file is unusable.

    The message names the result file and the field; [on_page_markdown][] adds the page.
    """

    def __init__(self, file: str, field: str | None, problem: str) -> None:
        self.file, self.field, self.problem = file, field, problem
        self.page: str | None = None
        super().__init__(file, field, problem)

    def __str__(self) -> str:
        where = f"{self.page}: " if self.page else ""
        field = f" `{self.field}`" if self.field else ""
        return (
            f"{where}cannot draw the figure from benchmarks/results/{self.file}:"
            f"{field} {self.problem}"
        )


def _wrap(value: Any, file: str, path: str) -> Any:
    if isinstance(value, Mapping):
        return Fields(value, file, path)
    if isinstance(value, list):
        return Items(value, file, path)
    return value


class Fields(Mapping[str, Any]):
    """A part of a result file whose missing fields raise [FigureError][], by dotted path.

    ``fields["runs"]`` raises when ``runs`` is missing; a field that may be absent is
    read with [optional][Fields.optional]. ``get`` is refused, so a renderer cannot
    quietly draw a default.
    """

    def __init__(self, data: Mapping[str, Any], file: str, path: str = "") -> None:
        self._data, self.file, self.path = data, file, path

    def _at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def __getitem__(self, key: str) -> Any:
        if key not in self._data:
            raise FigureError(self.file, self._at(key), "is missing")
        return _wrap(self._data[key], self.file, self._at(key))

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Any:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: str, default: Any = None) -> Any:
        """Refused: read a field with ``[]`` or [optional][Fields.optional]."""
        raise TypeError(f"read {self._at(key)} with [] or optional(), not get()")

    def optional(self, key: str) -> Any:
        """A field that may be absent: its value, or ``None``."""
        return self[key] if key in self._data else None

    def number(self, key: str) -> float | None:
        """A numeric field (``null`` allowed); a string or a list is refused."""
        value = self[key]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise FigureError(self.file, self._at(key), f"is not a number: {value!r}")
        return value


class Items(Sequence[Any]):
    """A list in a result file whose entries are read strictly too."""

    def __init__(self, data: list[Any], file: str, path: str) -> None:
        self._data, self.file, self.path = data, file, path

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self._data)))]
        return _wrap(self._data[index], self.file, f"{self.path}.{index}")

    def __len__(self) -> int:
        return len(self._data)


# -- where a figure comes from --------------------------------------------------------


def _loads(values: Any) -> str | None:
    if values is None:
        return None
    if not isinstance(values, Sequence) or not values:
        raise TypeError("a load average is a list of numbers")
    return f"{float(values[0]):.2f}"


def provenance(name: str, measured: Fields, lang: str, *, markdown: bool = True) -> str:
    """One line: the result file, the date it was measured and the machine's load then.

    ``measured`` is the file's ``measured`` entry: ``date`` is required (``null`` when
    the benchmark did not record it, shown as such, with the date the file was committed
    when ``committed`` says it), and so are the load averages (``null`` when unknown).
    """
    t = LABELS[lang]
    date = measured["date"]
    if date is None:
        committed = measured.optional("committed")
        when = (
            t["date_unknown"].format(committed=committed) if committed else t["date_unknown_bare"]
        )
    else:
        when = t["measured_on"].format(date=str(date).replace("T", " ").replace("Z", " UTC"))
    start, end = _loads(measured["load_average_at_start"]), _loads(measured["load_average_at_end"])
    cpus = measured.optional("cpus")
    if start is None and end is None:
        load = t["load_unknown"]
    else:
        load = t["load"].format(
            start=start or "–",
            end=end or "–",
            cpus=t["cpus"].format(n=cpus) if cpus else "?",
        )
    file = f"benchmarks/results/{name}"
    source = t["from"].format(file=file)
    sep = "；" if lang == "zh" else "; "
    line = f"{source}{sep}{when}{sep}{load}"
    if not markdown:
        return html.escape(line.replace("`", ""))
    return line


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
    # The legend: a swatch per series (when there are several) and the reference line,
    # laid out left to right from the plot's edge and wrapped before the chart's edge.
    items: list[tuple[int, str]] = [(j, s.label) for j, s in enumerate(series) if len(series) > 1]
    if reference is not None:
        items.append((-1, f"{reference[0]} = {fmt(reference[1])}"))
    legend_rows: list[list[tuple[float, int, str]]] = []
    x_at = float(width)
    for j, label in items:
        item_w = 24 + _text_width(label)
        if x_at + item_w > width - 4 and (not legend_rows or legend_rows[-1]):
            legend_rows.append([])
            x_at = float(label_width if item_w <= width - label_width else 8)
        legend_rows[-1].append((x_at, j, label))
        x_at += item_w
    legend_h = 22 * len(legend_rows)
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
    for row, entries in enumerate(legend_rows):
        y = top + group_h * len(categories) + 22 * row + 16
        for x, j, label in entries:
            if j >= 0:  # a series' swatch
                out.append(
                    f'<rect x="{x:.1f}" y="{y - 9}" width="10" height="10" '
                    f'style="fill:{PALETTE[j % len(PALETTE)]}"/>'
                )
            else:  # the reference line's dashes
                out.append(
                    f'<line x1="{x:.1f}" y1="{y - 4}" x2="{x + 16:.1f}" y2="{y - 4}" '
                    'stroke="currentColor" stroke-dasharray="4 3"/>'
                )
            text_x = x + (14 if j >= 0 else 20)
            out.append(
                f'<text x="{text_x:.1f}" y="{y}" fill="currentColor">{html.escape(label)}</text>'
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
#
# Each reads its file through [Fields][]: a field it reads and the file lacks fails the
# build with the field's name.


def render_journal(data: Fields, lang: str) -> str:
    """``journal.json``: durable append cost next to the write+fsync floor."""
    t = LABELS[lang]
    rows: Fields = data["rows"]
    names = ordered(list(rows), JOURNAL_ORDER)
    syncs: Fields = data["syncs_per_append"]
    floor = rows["floor fsync"].number("median_us")
    chart = bar_chart(
        t["journal_chart"].format(n=data["n"]),
        names,
        [
            Series(t["median"], [rows[n].number("median_us") for n in names]),
            Series(t["p95"], [rows[n].number("p95_us") for n in names]),
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
        body.append([f"`{n}`", fmt(r["median_us"]), fmt(r["p95_us"]), fmt(r["x_floor"]), shown])
    header = [t["row"], t["median_us"], t["p95_us"], t["x_floor"], t["syncs"]]
    return chart + "\n" + table(header, body)


def render_backends(data: Fields, lang: str) -> str:
    """``backends.json``: latency and 1-vs-N-writer throughput of every backend."""
    t = LABELS[lang]
    results: Fields = data["results"]
    params: Fields = data["parameters"]
    writers = params["writers"]
    names = ordered(list(results), BACKEND_ORDER)
    measured = [n for n in names if "skipped" not in results[n]]
    latency = [results[n]["latency_ms"] for n in measured]
    out = [
        bar_chart(
            t["latency_chart"].format(n=params["n"]),
            measured,
            [
                Series(t["p50"], [lat.number("p50") for lat in latency]),
                Series(t["p95"], [lat.number("p95") for lat in latency]),
            ],
        ),
        bar_chart(
            t["throughput_chart"].format(w=writers),
            measured,
            [
                Series(t["one_writer"], [results[n].number("one_writer_per_s") for n in measured]),
                Series(
                    t["eight_writers"].format(w=writers),
                    [results[n].number("eight_writers_per_s") for n in measured],
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
        lat = r["latency_ms"]
        # One setting per line: the column stays narrow and no value is cut.
        settings = "<br>".join(f"`{k}={v}`" for k, v in sorted(r["settings"].items()))
        body.append(
            [
                f"`{n}`",
                fmt(lat["p50"]),
                fmt(lat["p95"]),
                fmt(r["one_writer_per_s"]),
                fmt(r["eight_writers_per_s"]),
                fmt(r["speedup"]),
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


def render_loop(data: Fields, lang: str) -> str:
    """``loop.json``: the cost of one loop step next to the floor, and resume time."""
    t = LABELS[lang]
    step: Fields = data["step"]
    floor = data["floor_fsync"].number("median_us")
    bars = [
        (t["loop_floor"], floor),
        (t["loop_effect"], step.number("per_effect_us")),
        (t["loop_step"], step.number("median_of_runs_us")),
        (t["loop_off"], step.number("synchronous_off_us")),
    ]
    out = [
        bar_chart(
            t["loop_chart"].format(r=data["repeats"]),
            [b[0] for b in bars],
            [Series("µs", [b[1] for b in bars])],
        )
    ]
    resume: Fields = data["resume_ms"]
    lengths = sorted(resume, key=int)
    out.append(
        bar_chart(
            t["resume_chart"],
            [t["resume_row"].format(n=f"{int(n):,}") for n in lengths],
            [Series("ms", [resume.number(n) for n in lengths])],
        )
    )
    concurrent: Fields = data["concurrent"]
    curve: Items = concurrent["curve"]
    chart = bar_chart(
        t["concurrent_chart"],
        [
            t["concurrent_row_one" if point["runs"] == 1 else "concurrent_row"].format(
                n=point["runs"]
            )
            for point in curve
        ],
        [
            Series(t["grouped"], [p.number("sqlite_full_effects_per_s") for p in curve]),
            Series(
                t["ungrouped"],
                [p.number("sqlite_full_ungrouped_effects_per_s") for p in curve],
            ),
            Series(t["memory_journal"], [p.number("memory_effects_per_s") for p in curve]),
        ],
    )
    if "measured" in concurrent:  # measured on its own (bench_loop.py --concurrent-only)
        chart = with_source(
            chart, provenance("loop.json", concurrent["measured"], lang, markdown=False)
        )
    out.append(chart)
    lg = data["peers"]["langgraph_sqlite_sync"]  # null when LangGraph was not installed
    peer = None if lg is None else lg.number("per_unit_us")
    per_effect = step.number("per_effect_us")
    rows = [
        [t["steps"], fmt(data["steps"])],
        [t["appends"], fmt(data["appends_per_step"])],
        [t["fsyncs"], fmt(data["fsync_syscalls_per_step"])],
        [t["x_floor_effect"], fmt(step["per_effect_x_floor_median"])],
        [t["x_floor_step"], fmt(step["x_floor_median"])],
        [t["sync_share"], _sync_share(step.number("sync_share_us"), t)],
        [t["concurrent_ratio"], fmt(concurrent["ratio"])],
        [t["langgraph_ratio"], fmt(peer / per_effect if peer and per_effect else None)],
    ]
    return "\n".join(out) + "\n" + table([t["metric"], t["value"]], rows)


def _sync_share(value: float | None, t: Mapping[str, str]) -> str:
    """The syncs' share of a step: FULL minus OFF, which noise can make negative."""
    if value is not None and value <= 0:
        return t["sync_hidden"]
    return fmt(value)


def render_replay(data: Fields, lang: str) -> str:
    """``replay.json``: the bundled suite per backend, and the diff engine at scale."""
    t = LABELS[lang]
    suite: Fields = data["suite"]
    per_backend: Fields = suite["per_backend_seconds"]
    names = ordered(list(per_backend), BACKEND_ORDER)
    d: Fields = data["diff"]
    out = [
        bar_chart(t["suite_chart"], names, [Series("s", [per_backend.number(n) for n in names])]),
        bar_chart(
            t["diff_chart"].format(n=fmt(d["events_per_snapshot"]), c=fmt(d["changed_events"])),
            [t["normalise"], t["diff"]],
            [Series("s", [d.number("normalise_both_best_seconds"), d.number("diff_best_seconds")])],
        ),
    ]
    rows = [
        [
            t["suite_total"],
            f"{fmt(suite['best_seconds'])} / {fmt(suite['median_seconds'])}",
            fmt(suite["aim_seconds"]),
        ],
        [t["suite_cases"], f"{fmt(suite['cases'])} × {len(suite['backends'])}", "–"],
        [t["agree"], t["yes"] if suite["all_agree"] else t["no"], "–"],
        [
            f"{t['diff']}, best / median (s)" if lang == "en" else "比对，最好 / 中位数（秒）",
            f"{fmt(d['diff_best_seconds'])} / {fmt(d['diff_median_seconds'])}",
            fmt(d["aim_seconds"]),
        ],
    ]
    both = d.optional("normalise_and_diff_best_seconds")  # older results lack it
    if both is not None:
        rows.append(
            [
                "normalise both + diff, best (s)"
                if lang == "en"
                else "规范化两份快照 + 比对，最好（秒）",
                fmt(both),
                fmt(d["aim_seconds"]),
            ]
        )
    rows.append(
        [t["diff_found"], f"{fmt(d['differences_found'])} / {fmt(d['changed_events'])}", "–"]
    )
    return "\n".join(out) + "\n" + table([t["metric"], t["value"], t["aim"]], rows)


def _before_after(before: Any, after: Any) -> str:
    return f"{fmt(before)} → {fmt(after)}"


def render_audit(data: Fields, lang: str) -> str:
    """``audit.json``: tasks/s and submit-to-claim latency, before and after, by workers.

    Every backend that ran has a ``before`` and an ``after`` list of runs, one per worker
    count; a backend that did not run says why in ``skipped``.
    """
    t = LABELS[lang]
    backends: Fields = data["backends"]
    names = [n for n in backends if "skipped" not in backends[n]]
    if not names:
        raise FigureError("audit.json", "backends", "has no backend that ran")

    def runs(name: str, side: str) -> dict[int, Fields]:
        return {int(r["workers"]): r for r in backends[name][side]}

    before = {n: runs(n, "before") for n in names}
    after = {n: runs(n, "after") for n in names}
    counts = sorted({w for n in names for w in after[n]})
    for n in names:
        for w in counts:
            for side, got in (("before", before[n]), ("after", after[n])):
                if w not in got:
                    raise FigureError(
                        "audit.json", f"backends.{n}.{side}", f"has no run with {w} workers"
                    )

    def label(n: str, w: int) -> str:
        return t["audit_row_one" if w == 1 else "audit_row"].format(backend=n, n=w)

    pairs = [(n, w) for n in names for w in counts]
    labels = [label(n, w) for n, w in pairs]
    out = [
        t["audit_before_after"].format(before=data["before"], after=data["after"]) + "\n",
        bar_chart(
            t["audit_tasks_chart"].format(n=data["tasks_per_config"]),
            labels,
            [
                Series(t["before"], [before[n][w].number("tasks_per_s") for n, w in pairs]),
                Series(t["after"], [after[n][w].number("tasks_per_s") for n, w in pairs]),
            ],
        ),
        bar_chart(
            t["audit_claim_chart"].format(n=data["latency_submits"]),
            labels,
            [
                Series(
                    t["p50"], [after[n][w]["submit_to_claim_ms"].number("p50") for n, w in pairs]
                ),
                Series(
                    t["p95"], [after[n][w]["submit_to_claim_ms"].number("p95") for n, w in pairs]
                ),
            ],
        ),
    ]
    if data["loaded"]:
        out.insert(0, f'!!! note "{t["loaded_title"]}"\n\n    {t["loaded"]}\n')
    body = []
    for n in backends:
        if n not in names:
            reason = backends[n]["skipped"]
            body.append([f"`{n}`", t["skipped"].format(reason=reason), "", "", "", ""])
            continue
        for w in counts:
            b, a = before[n][w], after[n][w]
            body.append(
                [
                    # The durability under the name: one column less on a phone.
                    f"`{n}`<br>{backends[n]['durability']}",
                    fmt(w),
                    _before_after(b["tasks_per_s"], a["tasks_per_s"]),
                    _before_after(b["queue_plans_per_task"], a["queue_plans_per_task"]),
                    _before_after(b["submit_to_claim_ms"]["p50"], a["submit_to_claim_ms"]["p50"]),
                    _before_after(b["submit_to_claim_ms"]["p95"], a["submit_to_claim_ms"]["p95"]),
                ]
            )
    header = [
        f"{t['backend']}, {t['durability']}"
        if lang == "en"
        else f"{t['backend']}，{t['durability']}",
        t["workers_col"],
        t["tasks_per_s_ba"],
        t["plans_ba"],
        t["claim_p50_ba"],
        t["claim_p95_ba"],
    ]
    return "\n".join(out) + "\n" + table(header, body)


def render_guard(data: Fields, lang: str) -> str:
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
    for own in data["guard_points"]:
        out.append(
            t["guard_own"].format(
                points=own["points"],
                runtime=f"{own['framework']} ({own['mode']})",
                repeated=own["repeated"] - own["never_repeated"],
                never=own["never_repeated"],
                interrupts=own["interrupts"],
            )
        )
    modes = ("sync", "async")
    labels = [t["floor"]]
    values = [data["floor_fsync"].number("median_us")]
    for mode in modes:
        labels += [t["guard_plain"].format(mode=mode), t["guard_guarded"].format(mode=mode)]
        values += [
            data[mode]["unguarded"].number("median_us"),
            data[mode]["guarded"].number("median_us"),
        ]
    out.append(
        bar_chart(t["guard_cost_chart"].format(n=data["runs"]), labels, [Series("µs", values)])
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


def notebooks_in_tree() -> list[str]:
    """Every notebook of the project, as ``notebooks/<lang>/<name>.ipynb``."""
    return sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("notebooks/*/*.ipynb"))


def render_docs(data: Fields, lang: str) -> str:
    """``docs.json``: the build's times, and which of today's notebooks they cover.

    A result that timed fewer notebooks than ``notebooks/`` holds says so above its
    figures, naming the notebooks it did not execute.
    """
    t = LABELS[lang]
    seconds: Fields = data["notebook_seconds"]
    names = list(seconds)
    total = notebooks_in_tree()
    missing = [n for n in total if n not in seconds]
    if missing:
        shown = ", ".join(f"`{n.removeprefix('notebooks/')}`" for n in missing)
        note = t["docs_partial"].format(
            n=len(total) - len(missing), total=len(total), missing=shown
        )
        out = [f'!!! warning "{t["docs_partial_title"]}"\n\n    {note}\n']
    else:
        out = [t["docs_full"].format(total=len(total)) + "\n"]
    labels = [n.removeprefix("notebooks/").removesuffix(".ipynb") for n in names]
    if "cold_seconds" in data:  # notebooks two at a time, then the build; one aim for both
        per_notebook = data["notebook_aim_seconds"]
        aim = f"≤ {fmt(data['cold_aim_seconds'])}"
        series = [Series(t["docs_wall"], [seconds.number(n) for n in names])]
        cpu_rows = []
        # CPU times came later: a result with them must have both; one from before has none.
        if "notebook_cpu_seconds" in data or "build_cpu_seconds" in data:
            cpu: Fields = data["notebook_cpu_seconds"]
            series.append(Series(t["docs_cpu"], [cpu.number(n) for n in names]))
            cpu_sum = sum(cpu.number(n) or 0.0 for n in names)
            build_cpu = data.number("build_cpu_seconds") or 0.0
            label = t["docs_cpu_total"].format(
                total=fmt(cpu_sum), n=data["parallel"], build=fmt(build_cpu)
            )
            cpu_rows.append([label, fmt(cpu_sum / data["parallel"] + build_cpu), aim])
        title = t["docs_chart_cpu"] if len(series) > 1 else t["docs_chart"]
        out.append(
            bar_chart(
                title.format(n=data["parallel"]),
                labels,
                series,
                reference=(t["docs_notebook_aim"], per_notebook),
            )
        )
        slowest = max(names, key=lambda n: seconds.number(n) or 0.0)
        rows = [
            [
                t["docs_nbmake_parallel"].format(n=data["parallel"]),
                fmt(data["nbmake_seconds"]),
                "–",
            ],
            [t["docs_render"], fmt(data["build_seconds"]), "–"],
            [t["docs_cold_total"], fmt(data["cold_seconds"]), aim],
            *cpu_rows,
            [t["docs_nbmake_warm"], fmt(data["warm_nbmake_seconds"]), "–"],
            [
                t["docs_slowest"].format(name=slowest.removeprefix("notebooks/")),
                fmt(seconds.number(slowest)),
                f"≤ {fmt(per_notebook)}",
            ],
        ]
        rows.append(
            [t["docs_covered"], f"{len(total) - len(missing)} / {len(total)}", f"{len(total)}"]
        )
        out.append(table([t["metric"], t["value"], t["aim"]], rows))
        return "\n".join(out)
    out.append(
        bar_chart(t["docs_chart"], labels, [Series("s", [seconds.number(n) for n in names])])
    )
    aim = f"≤ {fmt(data['build_aim_seconds'])}"
    if "warm_nbmake_seconds" in data:  # nbmake executes the notebooks; the build renders
        rows = [
            [t["docs_nbmake_cold"], fmt(data["nbmake_seconds"]), "–"],
            [t["docs_render"], fmt(data["build_seconds"]), aim],
            [t["docs_nbmake_warm"], fmt(data["warm_nbmake_seconds"]), "–"],
        ]
    else:  # a result from before: the build executed the notebooks itself
        rows = [
            [t["docs_cold"], fmt(data["build_seconds"]), aim],
            [t["docs_warm"], fmt(data["warm_build_seconds"]), "–"],
            [t["docs_nbmake"], fmt(data["nbmake_seconds"]), "–"],
        ]
    rows.append([t["docs_covered"], f"{len(total) - len(missing)} / {len(total)}", f"{len(total)}"])
    out.append(table([t["metric"], t["value"], t["aim"]], rows))
    return "\n".join(out)


def render_soak(data: Fields, lang: str) -> str:
    """``soak.json``: the SIGKILL soak, a column per backend and a row per measure."""
    t = LABELS[lang]
    settings: Fields = data["settings"]
    backends: Items = data["backends"]
    intro = t["soak_settings"].format(
        duration=f"{settings['duration_s']:g}",
        steps=settings["steps_per_run"],
        children=t.get(f"soak_{settings['children']}", settings["children"]),
        delay=f"{settings['max_delay_s']:g}",
        seed=settings["seed"],
    )
    verdict = t["soak_ok"] if data["ok"] else t["soak_failed"]
    cols = [b["backend"] for b in backends]

    def row(label: str, cell: Callable[[Fields], str]) -> list[str]:
        return [label, *(cell(b) for b in backends)]

    rows = [
        row(t["soak_seconds"], lambda b: fmt(b["seconds"])),
        row(t["soak_children"], lambda b: fmt(b["children"])),
        row(t["soak_kills"], lambda b: fmt(b["kills"])),
        row(
            t["soak_runs"],
            lambda b: f"{fmt(b['runs_completed'])} ({fmt(b['steps_completed'])})",
        ),
        row(t["soak_unknown"], lambda b: fmt(b["children_stopped_unknown"])),
        row(
            t["soak_resolved"],
            lambda b: f"{fmt(b['resolutions_happened'])} / {fmt(b['resolutions_not_happened'])}",
        ),
        row(t["soak_lives"], lambda b: fmt(b["max_lives_per_run"])),
        row(
            t["soak_failures"],
            lambda b: "; ".join(str(f) for f in b["failures"]) or t["soak_none"],
        ),
    ]
    chart = bar_chart(
        t["soak_chart"],
        [str(c) for c in cols],
        [Series(t["soak_kills"], [b.number("kills") for b in backends])],
    )
    return f"{intro} {verdict}\n\n{chart}\n" + table([t["metric"], *(f"`{c}`" for c in cols)], rows)


def render_audit_chaos(data: Fields, lang: str) -> str:
    """``audit_chaos.json``: the audit chaos counts, a column per fault and a row per count."""
    t = LABELS[lang]
    runs: Items = data["runs"]
    if not runs:
        raise FigureError("audit_chaos.json", "runs", "is empty")
    cols = []
    for r in runs:
        key = f"chaos_fault_{r['fault']}"
        if key not in t:
            raise FigureError("audit_chaos.json", "runs.fault", f"names no known fault ({key})")
        cols.append(t[key])

    def row(label: str, cell: Callable[[Fields], str]) -> list[str]:
        return [label, *(cell(r) for r in runs)]

    def events(r: Fields) -> str:
        happened: Fields = r["fault_events"]
        return ", ".join(f"`{k}` {fmt(happened.number(k))}" for k in happened)

    rows = [
        row(t["chaos_seconds"], lambda r: fmt(r.number("seconds"))),
        row(t["chaos_not_once"], lambda r: fmt(r.number("not_terminal_once"))),
        row(t["chaos_wrong"], lambda r: fmt(r.number("wrong_outcome"))),
        row(
            t["chaos_overlaps"],
            lambda r: f"{fmt(r.number('overlaps'))} / {fmt(r.number('overlaps_reported'))}",
        ),
        row(t["chaos_orphans"], lambda r: fmt(r.number("orphans"))),
        row(t["chaos_dead"], lambda r: fmt(r.number("dead_workers"))),
        row(
            t["chaos_lost"],
            lambda r: f"{fmt(r.number('acked_lost'))} / {fmt(r.number('acked_writes'))}",
        ),
        row(t["chaos_writer_kills"], lambda r: fmt(r.number("journal_kills"))),
        row(
            t["chaos_writer_lost"],
            lambda r: (
                f"{fmt(r.number('journal_acked_lost'))} / "
                f"{fmt(r.number('journal_duplicates'))} / {fmt(r.number('journal_acked'))}"
            ),
        ),
        row(t["chaos_events"], events),
    ]
    held = all(bool(r["held"]) for r in runs)
    intro = t["chaos_intro"].format(
        tasks=fmt(data.number("tasks_per_fault")), workers=fmt(data.number("workers_per_fault"))
    )
    chart = bar_chart(
        t["chaos_chart"],
        cols,
        [Series(t["chaos_acked"], [r.number("acked_writes") for r in runs])],
    )
    verdict = t["chaos_ok"] if held else t["chaos_failed"]
    return f"{intro} {verdict}\n\n{chart}\n" + table([t["metric"], *cols], rows)


SHAPE_TITLES_ZH = {
    "shop-sync": "三个节点，durability sync",
    "shop-async": "三个节点，durability async",
    "toolnode-2": "ToolNode，2 笔并行扣款 + 一次查询",
    "toolnode-3": "ToolNode，3 笔并行扣款 + 一次查询",
    "send": "每个工具调用一个 Send，3 笔扣款 + 一次查询",
    "gather": "一个节点里 asyncio.gather 两笔扣款",
    "retry": "RetryPolicy，一笔扣款被拒绝一次",
    "subgraph": "父图在三个步上运行的子图",
    "agents-together": "一次回复里两个工具调用",
    "agents-handoff": "一次回复里两个调用，在交接之后",
}
"""The Chinese title of each shape ``bench_repeats.py`` measures (its result holds English)."""


def _shape_title(row: Any, lang: str, file: str) -> str:
    if lang != "zh":
        return str(row["title"])
    title = SHAPE_TITLES_ZH.get(str(row["shape"]))
    if title is None:
        raise FigureError(file, f"rows[shape={row['shape']}]", "has no Chinese title")
    return title


def render_repeats(data: Fields, lang: str) -> str:
    """``repeats.json``: per shape, `NEVER` repeats without and with the guard."""
    t = LABELS[lang]
    rows_in = list(data["rows"])
    backends = [b for b in ("sqlite", "postgresql") if f"aimed_{b}_with_guard" in rows_in[0]]
    header = [t["repeats_shape"], t["repeats_points"]]
    for backend in backends:
        kills = min(int(r[f"aimed_{backend}_with_guard"]["kills"]) for r in rows_in)
        header.append(t["repeats_aimed"].format(n=f"≥ {fmt(kills)}", backend=backend))
    rows = []
    for r in rows_in:
        off, on = r["crash_points_without_guard"], r["crash_points_with_guard"]
        cells = [
            f"{r['framework']}: {_shape_title(r, lang, 'repeats.json')}",
            t["repeats_cell"].format(
                without=fmt(off["never_repeats"]),
                points_without=fmt(off["points_with_never_repeats"]),
                points=fmt(off["points"]),
                with_=fmt(on["never_repeats"]),
                points_with=fmt(on["points_with_never_repeats"]),
                points_guarded=fmt(on["points"]),
            ),
        ]
        for backend in backends:
            off, on = r[f"aimed_{backend}_without_guard"], r[f"aimed_{backend}_with_guard"]
            cells.append(
                t["repeats_kill_cell"].format(
                    without=fmt(off["never_repeats"]),
                    with_=fmt(on["never_repeats"]),
                    lost=fmt(on["lost"]),
                )
            )
        rows.append(cells)
    versions = ", ".join(f"{k} {v}" for k, v in sorted(data["versions"].items()))
    ms = fmt(round(float(data["aimed_window_s"]) * 1000))
    note = t["repeats_versions"].format(versions=versions, ms=ms)
    return f"{table(header, rows)}\n{note}\n"


CPU_GOAL = 400_000
"""Issue 24's goal: instructions per step on the memory journal."""


def render_cpu(data: Fields, lang: str) -> str:
    """``cpu.json``: instructions per step (callgrind), ours next to LangGraph's, and where."""
    t = LABELS[lang]
    memory: Fields = data["memory"]
    sqlite: Fields = data["sqlite"]
    langgraph: Fields = data["langgraph"]
    peer = langgraph.optional("instructions_per_step")  # absent when LangGraph was missing
    ours = memory.number("instructions_per_step")
    rows = [
        (t["cpu_memory"], ours),
        (t["cpu_sqlite"], sqlite.number("instructions_per_step")),
        (t["cpu_langgraph"].format(version=langgraph["version"]), peer),
    ]
    chart = bar_chart(
        t["cpu_chart"].format(n=data["steps"]),
        [r[0] for r in rows],
        [Series(t["cpu_thousands"], [None if v is None else v / 1000 for _, v in rows])],
        reference=(t["cpu_goal"], CPU_GOAL / 1000),
    )
    runs: Items = memory["runs_instructions_per_step"]
    counts = [float(x) for x in runs]
    table_rows = [
        [t["steps"], fmt(data["steps"])],
        [t["cpu_runs"], fmt(data["repeats"])],
        [t["cpu_spread"], fmt(max(counts) - min(counts) if len(counts) > 1 else None)],
        [t["cpu_goal"], fmt(CPU_GOAL / 1000)],
        [t["cpu_ratio"], fmt(peer / ours if peer and ours else None)],
        [t["cpu_calls"], fmt(data["python_calls"]["calls_per_step"])],
    ]
    top: Items = memory["top_functions"]
    profile = [[f"`{f['function']}`", fmt(f.number("instructions_per_step"))] for f in top]
    return (
        chart
        + "\n"
        + table([t["metric"], t["value"]], table_rows)
        + "\n\n"
        + f"**{t['cpu_top']}**\n\n"
        + table([t["cpu_function"], t["cpu_per_step"]], profile)
    )


DURABLE_GOALS = {"sqlite": 2.0, "jsonl": 1.25}
"""Issue 24's goals: the durable part of an effect, as a multiple of the floor."""
DURABLE_CONCURRENT_GOAL = 0.70
"""Issue 24's goal: 32 runs on SQLite FULL against the same runs on the memory journal."""


def render_durable(data: Fields, lang: str) -> str:
    """``durable.json``: the durable part of an effect against the floor, and runs at once."""
    t = LABELS[lang]
    one: Fields = data["single"]
    rows: Fields = one["rows"]
    floor = one["floor"].number("median_us")
    durable = [k for k in rows if k != "memory"]
    chart = bar_chart(
        t["durable_chart"].format(r=data["repeats"]),
        [t[f"durable_kind_{k}"] for k in durable],
        [Series(t["durable_part"], [rows[k].number("durable_part_us") for k in durable])],
        reference=(t["durable_floor"], floor) if floor else None,
    )
    split: Fields = one["split"]
    body = []
    for k in rows:
        r = rows[k]
        syncs = r.optional("syncs_per_append")
        parts = (
            f"{fmt(split[k].number('sync_us'))} / {fmt(split[k].number('rest_us'))}"
            if k in split
            else "–"
        )
        body.append(
            [
                t[f"durable_kind_{k}"],
                fmt(r.number("per_effect_us")),
                fmt(r.number("durable_part_us")) if k != "memory" else "–",
                fmt(r.number("durable_x_floor")) if k != "memory" else "–",
                fmt(r.number("durable_x_floor_median_of_rounds")) if k != "memory" else "–",
                parts,
                fmt(r.number("statements_per_append")) if k.startswith("sqlite") else "–",
                fmt(r.number("commits_per_append")) if k.startswith("sqlite") else "–",
                fmt(syncs) if syncs is not None else "–",
            ]
        )
    header = [
        t["durable_journal"],
        t["durable_per_effect"],
        t["durable_part"],
        t["durable_x_floor"],
        t["durable_x_rounds"],
        t["durable_split"],
        t["durable_statements"],
        t["durable_commits"],
        t["durable_syncs"],
    ]
    curve: Items = data["concurrent"]["curve"]
    kinds = [k for k in ("sqlite", "jsonl", "sqlite_before", "jsonl_before") if k in curve[0]]
    cc_chart = bar_chart(
        t["durable_cc_chart"],
        [
            t["concurrent_row_one" if p["runs"] == 1 else "concurrent_row"].format(n=p["runs"])
            for p in curve
        ],
        [  # three colours: the table below has JSONL as before too
            Series(t[f"durable_kind_{k}"], [p[k].number("ratio_to_memory") for p in curve])
            for k in kinds[:3]
        ],
        reference=(t["durable_goal"], DURABLE_CONCURRENT_GOAL),
    )
    cc_body = []
    for p in curve:
        sqlite: Fields = p["sqlite"]
        cc_body.append(
            [
                fmt(p["runs"]),
                fmt(p["memory"].number("effects_per_s")),
                *(
                    t["durable_cc_cell"].format(
                        rate=fmt(p[k].number("effects_per_s")),
                        ratio=fmt(p[k].number("ratio_to_memory"), 2),
                    )
                    for k in kinds
                ),
                f"{fmt(sqlite.number('commits_per_append'))} / "
                f"{fmt(sqlite.number('statements_per_append'))}",
                fmt(p["load_average"][0]),
            ]
        )
    cc_header = [
        t["durable_runs"],
        t["durable_cc_memory"],
        *(t[f"durable_kind_{k}"] for k in kinds),
        t["durable_cc_commits"],
        t["durable_load"],
    ]
    return chart + "\n" + table(header, body) + "\n" + cc_chart + "\n" + table(cc_header, cc_body)


def render_snapshots(data: Fields, lang: str) -> str:
    """``snapshots.json``: resume flat in run length and scoped state; snapshot bytes flat."""
    t = LABELS[lang]
    resume: Fields = data["resume"]
    others = f"{int(data['other_sessions']):,}"

    def label(key: str) -> str:
        steps, _, scoped = key.partition("_")
        n = f"{int(steps):,}"
        if not scoped:
            return t["snap_row"].format(n=n)
        name = "snap_row_bare" if "without" in scoped else "snap_row_scoped"
        return t[name].format(n=n, o=others)

    keys = sorted(resume, key=lambda k: (int(k.partition("_")[0]), len(k)))
    shown = [k for k in keys if "without" not in k]
    chart = bar_chart(
        t["snap_chart"],
        [label(k) for k in shown],
        [Series(t["snap_ms"], [resume[k].number("ms") for k in shown])],
    )
    rows = [[label(k), fmt(resume[k]["ms"]), fmt(resume[k]["records_read"])] for k in keys]
    sizes: Fields = data["session_snapshot_bytes"]
    facts = [
        [t["snap_ratio"], fmt(data["resume_ratio_slowest_fastest"])],
        *[[t["snap_bytes"].format(n=f"{int(n):,}"), fmt(sizes[n])] for n in ("1000", "10000")],
        [t["snap_bytes_ratio"], fmt(data["snapshot_ratio_10000_1000"])],
    ]
    return (
        chart
        + "\n"
        + table([t["snap_case"], t["snap_ms"], t["snap_reads"]], rows)
        + "\n\n"
        + table([t["metric"], t["value"]], facts)
    )


SCALE_BACKENDS = {"sqlite": "SQLite", "postgres": "PostgreSQL"}


def render_scale(data: Fields, lang: str) -> str:
    """``scale.json``: a journal's costs at each size it reached, per backend."""
    t = LABELS[lang]
    backends: Fields = data["backends"]
    names = [b for b in SCALE_BACKENDS if b in backends]
    cats, resume, show = [], [], []
    for b in names:
        rows: Fields = backends[b]
        for n in sorted(rows, key=int):
            cats.append(t["scale_row"].format(backend=SCALE_BACKENDS[b], n=f"{int(n):,}"))
            resume.append(rows[n].number("resume_ms"))
            show.append(rows[n].number("runs_show_ms"))
    chart = bar_chart(
        t["scale_chart"],
        cats,
        [Series(t["scale_resume"], resume), Series(t["scale_show"], show)],
    )
    metrics = [
        ("scale_runs", "runs"),
        ("scale_bytes", "bytes_per_record"),
        ("scale_list", "runs_list_ms"),
        ("scale_show_ms", "runs_show_ms"),
        ("scale_resume_ms", "resume_ms"),
        ("scale_doctor", "doctor_records_per_s"),
        ("scale_copy", "copy_records_per_s"),
        ("scale_prune", "prune_records_per_s"),
    ]
    tables = []
    for b in names:
        rows = backends[b]
        sizes = sorted(rows, key=int)
        header = [t["scale_metric"].format(backend=SCALE_BACKENDS[b])]
        header += [fmt(rows[n]["records"]) for n in sizes]
        body = [[t[label], *[fmt(rows[n][key]) for n in sizes]] for label, key in metrics]
        tables.append(table(header, body))
    return chart + "\n" + "\n\n".join(tables)


def render_effects_pydantic(data: Fields, lang: str) -> str:
    """``effects_pydantic.json``: Pydantic AI alone and on DBOS, without and with the guard.

    The PostgreSQL column holds the guarded runs only: unguarded, Pydantic AI keeps
    nothing on a server (the history is the caller's file, DBOS runs on SQLite).
    """
    t = LABELS[lang]
    modes: dict[str, dict[bool, Any]] = {}
    for row in data["rows"]:
        modes.setdefault(str(row["mode"]), {})[bool(row["guarded"])] = row
    kills = min(int(row["aimed"]["kills"]) for row in data["rows"])
    pg_kills = min(int(pair[True]["aimed_postgresql"]["kills"]) for pair in modes.values())
    rows = []
    for mode, pair in modes.items():
        off, on = pair[False], pair[True]
        rows.append(
            [
                t[f"pydantic_mode_{mode}"],
                t["pydantic_points_cell"].format(
                    without=fmt(off["points_with_never_repeats"]),
                    points=fmt(off["crash_points"]),
                    with_=fmt(on["points_with_never_repeats"]),
                    points_guarded=fmt(on["crash_points"]),
                ),
                t["repeats_kill_cell"].format(
                    without=fmt(off["aimed"]["never_repeats"]),
                    with_=fmt(on["aimed"]["never_repeats"]),
                    lost=fmt(on["aimed"]["runs_with_losses"]),
                ),
                t["pydantic_pg_cell"].format(
                    with_=fmt(on["aimed_postgresql"]["never_repeats"]),
                    lost=fmt(on["aimed_postgresql"]["runs_with_losses"]),
                ),
            ]
        )
    header = [
        t["repeats_shape"],
        t["pydantic_points"],
        t["pydantic_kills"].format(n=f"≥ {kills}"),
        t["pydantic_kills_pg"].format(n=f"≥ {pg_kills}"),
    ]
    return table(header, rows) + "\n" + f"`{data['shape']}`\n"


_FRAMEWORKS_LABELS = {
    "en": {
        "store": "store",
        "framework": "framework",
        "pack": "hostile pack (s)",
        "long": "{n}-event case (s)",
        "agreed": "`agreed`",
        "diverged": "`diverged`",
        "na": "`not_applicable`",
        "reference": "reference",
        "chart": "One {n}-event session on each store (seconds, aim ≤ {aim:g} s)",
        "seconds": "seconds",
        "aim": "aim",
        "versions": "Versions",
        "long_not_run": "not applicable",
        "timed_out": "stopped after {budget:g} s",
    },
    "zh": {
        "store": "存储",
        "framework": "框架",
        "pack": "恶意取值用例包（秒）",
        "long": "{n} 个事件的用例（秒）",
        "agreed": "`agreed`",
        "diverged": "`diverged`",
        "na": "`not_applicable`",
        "reference": "参照",
        "chart": "每个存储上一个 {n} 个事件的会话（秒，目标 ≤ {aim:g} 秒）",
        "seconds": "秒",
        "aim": "目标",
        "versions": "版本",
        "long_not_run": "不适用",
        "timed_out": "{budget:g} 秒后停止",
    },
}


def render_frameworks(data: Fields, lang: str) -> str:
    """``frameworks.json``: per store, the pack's time and outcome and the long case's time."""
    t = _FRAMEWORKS_LABELS[lang]
    long: Fields = data["long_case"]
    events, aim = long["events"], long.number("aim_seconds")
    rows: Fields = data["rows"]
    names = list(rows)
    seconds: list[float | None] = []
    lines = []
    for name in names:
        row: Fields = rows[name]
        status = row["long_case_status"]
        long_s = row.number("long_case_s") if status == "ran" else None
        seconds.append(long_s)
        long_cell = {
            "ran": fmt(long_s),
            "not_applicable": t["long_not_run"],
            "timed_out": t["timed_out"].format(budget=long.number("budget_seconds")),
        }[status]
        if row.optional("reference"):
            counts = [t["reference"], "", ""]
        else:
            counts = [fmt(row["agreed"]), fmt(row["diverged"]), fmt(row["not_applicable"])]
        lines.append(
            [
                f"`{name}`",
                str(row["framework"]),
                fmt(row.number("pack_median_s")),
                long_cell,
                *counts,
            ]
        )
    chart = bar_chart(
        t["chart"].format(n=fmt(events), aim=aim),
        names,
        [Series(t["seconds"], seconds)],
        reference=(t["aim"], float(aim or 0)),
    )
    versions: Fields = data["versions"]
    used = ", ".join(f"{k} {versions[k]}" for k in versions)
    header = [
        t["store"],
        t["framework"],
        t["pack"],
        t["long"].format(n=fmt(events)),
        t["agreed"],
        t["diverged"],
        t["na"],
    ]
    return chart + "\n" + table(header, lines) + f"\n{t['versions']}: {used}\n"


RENDERERS: dict[str, Callable[[Fields, str], str]] = {
    "audit.json": render_audit,
    "audit_chaos.json": render_audit_chaos,
    "frameworks.json": render_frameworks,
    "cpu.json": render_cpu,
    "docs.json": render_docs,
    "durable.json": render_durable,
    "effects_pydantic.json": render_effects_pydantic,
    "guard.json": render_guard,
    "journal.json": render_journal,
    "backends.json": render_backends,
    "loop.json": render_loop,
    "repeats.json": render_repeats,
    "replay.json": render_replay,
    "scale.json": render_scale,
    "snapshots.json": render_snapshots,
    "soak.json": render_soak,
}


def with_source(drawn: str, source: str) -> str:
    """Name the result, its date and load in every chart caption that does not yet."""
    tag = '<br><span class="steadyloop-source" style="font-style:normal;font-size:0.9em">'
    parts = drawn.split("</figcaption>")
    return (
        "".join(
            part
            + ("" if tag in part.rsplit("<figcaption>", 1)[-1] else f"{tag}{source}</span>")
            + "</figcaption>"
            for part in parts[:-1]
        )
        + parts[-1]
    )


def render_known(name: str, data: Any, lang: str) -> str:
    """Draw a file with its own renderer, or generically, under the line naming its source.

    Raises:
        FigureError: the file lacks a field its renderer reads (or ``measured``), or a
            field has a value the renderer cannot draw.
    """
    if not isinstance(data, Mapping):
        raise FigureError(name, None, "is not a JSON object")
    fields = Fields(data, name)
    measured = fields["measured"]
    renderer = RENDERERS.get(name)
    try:
        drawn = renderer(fields, lang) if renderer is not None else render_generic(name, data, lang)
        source = provenance(name, measured, lang)
        caption = provenance(name, measured, lang, markdown=False)
    except FigureError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise FigureError(name, None, f"has a layout its renderer cannot draw ({exc!r})") from exc
    stop = "。" if lang == "zh" else "."
    return f'<p class="steadyloop-source" markdown="1">{source}{stop}</p>\n\n' + with_source(
        drawn, caption
    )


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
    top = {k: v for k, v in data.items() if k not in {"machine", "measured", rows_key}}
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


def _first_docstring_line(path: Path, lang: str = "en") -> str:
    """What a benchmark measures, in one line: its docstring's first, or ``SUMMARY_ZH``.

    Raises:
        FigureError: A Chinese page needs a script's summary and it has no ``SUMMARY_ZH``.
    """
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    if lang == "zh":
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and [getattr(t, "id", None) for t in node.targets] == ["SUMMARY_ZH"]
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                return node.value.value
        raise FigureError(path.name, "SUMMARY_ZH", "is missing: the zh page describes it")
    doc = ast.get_docstring(tree) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def shown(path: Path) -> str:
    """A path as the page shows it: relative to the project when it is inside it."""
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name


def describe_machine(data: Any, lang: str) -> str:
    """Where a result was measured, from the file's ``machine`` entry."""
    if not isinstance(data, Mapping):
        return "–"
    machine = data.get("machine")
    measured = data.get("measured")
    if isinstance(measured, Mapping) and measured.get("platform"):
        machine = measured  # benchmarks/_measured.py records the machine
    elif not isinstance(machine, Mapping):
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
        data = read(path)
        rows.append(
            [
                f"`{shown(path)}`",
                f"`{shown(script)}`" if script else "–",
                _measured_date(path.name, data, lang),
                describe_machine(data, lang),
            ]
        )
    return table([t["file"], t["script"], t["date"], t["machine"]], rows)


def _measured_date(name: str, data: Any, lang: str) -> str:
    """The date a result was measured, or that it was not recorded."""
    if not isinstance(data, Mapping):
        raise FigureError(name, None, "is not a JSON object")
    measured = Fields(data, name)["measured"]
    date = measured["date"]
    if date is None:
        return LABELS[lang]["date_unknown_bare"]
    return str(date).split("T")[0]


def section(path: Path, lang: str) -> str:
    """A whole section for a result file no block of the page names."""
    t = LABELS[lang]
    data = read(path)
    script = script_for(path)
    what = data.get("what") if isinstance(data, Mapping) else None
    if script is not None:
        intro = t["generic_intro"].format(
            script=shown(script),
            what=(what if lang == "en" else None) or _first_docstring_line(script, lang),
        )
    else:
        intro = t["generic_what"].format(name=path.name)
    anchor = "bench-" + re.sub(r"[^a-z0-9]+", "-", path.stem.lower()).strip("-")
    body = render_known(path.name, data, lang)
    return f"## `{path.name}` {{#{anchor}}}\n\n{intro}\n\n{body}"


def read(path: Path) -> Any:
    """Read one result file; a file that is not JSON is a [FigureError][]."""
    try:
        return load(path)
    except ValueError as exc:
        raise FigureError(path.name, None, f"is not valid JSON ({exc})") from exc


def chart(name: str, lang: str, directory: Path = RESULTS) -> str:
    """Charts and a table for one result file, which must exist."""
    path = directory / name
    if not path.is_file():
        raise FigureError(name, None, "does not exist (a chart marker outside its benchmark-if)")
    return render_known(name, read(path), lang)


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
    """Replace the benchmark markers of a Markdown page.

    Raises:
        PluginError: a figure of the page cannot be drawn from its result file; the
            message names the page, the file and the field. This stops any build.
    """
    if page.file.src_uri.endswith(".ipynb") or "<!-- benchmark-" not in markdown:
        return markdown
    try:
        text, used = render_page(markdown, language(page))
    except FigureError as exc:
        exc.page = page.file.src_uri
        raise PluginError(str(exc)) from exc
    log.info("%s: benchmark results from %s", page.file.src_uri, ", ".join(used) or "no file")
    return text
