"""The Python API pages, generated from the packages' ``__all__``: run this file after it changes.

``uv run python tests/docs/api_pages.py`` rewrites ``docs/{en,zh}/reference/api/*.md``;
``tests/docs/test_docs_api_pages.py`` fails while the committed pages differ from what it
would write, so the pages cannot drift from the code. Each package page renders its exports
one ``:::`` block at a time, in the groups below (the contract first, helpers for backend
authors last); an export that no group names yet lands in a last group, "Other names", until
someone places it. A group may name exports that another branch is adding: a name the
package does not export is skipped. The index is a table of every name of ``steadyloop.__all__`` with a
one-line summary (the docstring's first sentence; the Chinese one from ``SUMMARIES_ZH``,
falling back to the English), and the errors page renders ``steadyloop._errors.__all__``.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
API = Path("reference/api")
LANGUAGES = ("en", "zh")
OTHER = ("other-names", "Other names", "其他名字")


@dataclass(frozen=True)
class Group:
    """A section of a package page: its id, headings, optional intros and the names it renders."""

    id: str
    en: str
    zh: str
    intro_en: str
    intro_zh: str
    names: list[str]


@dataclass(frozen=True)
class Package:
    """A package page: its introduction in both languages and its groups, in page order."""

    intro_en: str
    intro_zh: str
    groups: list[Group]


PACKAGES: dict[str, Package] = {
    "journal": Package(
        intro_en="The journal contract, how a URL opens a journal, the backends in the package, and the helpers for people who write a backend. Server backends (`postgresql://`, `redis://`, `mysql://`) open through [`open_journal`][steadyloop.journal.open_journal]; their classes are not part of the public API. See [The journal](../../explanation/journal.md).",
        intro_zh="日志的约定、如何根据 URL 打开日志、包内自带的后端，以及给后端作者用的辅助工具。服务器后端（`postgresql://`、`redis://`、`mysql://`）通过 [`open_journal`][steadyloop.journal.open_journal] 打开，它们的类不属于公开 API。见[日志与持久性约定](../../explanation/journal.md)。",
        groups=[
            Group(
                "contract",
                "The journal contract",
                "日志的约定",
                "What every backend does: append batches atomically, read streams back in order.",
                "每个后端都遵守的约定：以原子方式追加批次，按顺序读回各个流。",
                ["Journal", "StreamWrite", "AppendResult"],
            ),
            Group(
                "opening",
                "Opening a journal",
                "打开日志",
                "",
                "",
                [
                    "open_journal",
                    "DEFAULT_URL",
                    "SCHEMES",
                    "ENTRY_POINT_GROUP",
                    "URL",
                    "parse_url",
                    "redact_url",
                ],
            ),
            Group(
                "names",
                "Names",
                "名称规则",
                "Rules for namespaces, stream names and idempotency keys.",
                "命名空间、流名称和幂等键须遵守的规则。",
                ["check_name", "MAX_NAME_BYTES"],
            ),
            Group(
                "backends",
                "Backends in the package",
                "包内自带的后端",
                "",
                "",
                ["SQLiteJournal", "JSONLJournal", "MemoryJournal"],
            ),
            Group(
                "for-backend-authors",
                "For backend authors",
                "供后端作者参考",
                "Building blocks for a new backend or a wrapper around one. See [Write a backend](../../how-to/write-a-backend.md).",
                "编写新后端或包装现有后端时用得上的构件。见[编写后端并运行一致性测试](../../how-to/write-a-backend.md)。",
                [
                    "PreparedBatch",
                    "ForwardingJournal",
                    "Files",
                    "FileLock",
                    "fsync_directory",
                    "namespace_filename",
                ],
            ),
        ],
    ),
    "records": Package(
        intro_en="Records, their canonical encoding, and the injectable clocks and id sources.",
        intro_zh="记录、记录的规范编码，以及可注入的时钟和 id 来源。",
        groups=[
            Group(
                "records",
                "Records",
                "记录",
                "",
                "",
                ["Record", "StoredRecord", "RecordFactory", "INTENT_KIND", "RESULT_KIND"],
            ),
            Group(
                "canonical-json",
                "Canonical JSON",
                "规范 JSON",
                "One encoding for every backend, so records compare byte for byte.",
                "所有后端共用一种编码，记录因此可以逐字节比较。",
                [
                    "canonical_json",
                    "encode",
                    "decode",
                    "check_canonical",
                    "JSONValue",
                    "MAX_DEPTH",
                    "MAX_INT_DIGITS",
                ],
            ),
            Group(
                "clocks-and-ids",
                "Clocks and id sources",
                "时钟与 id 来源",
                "Injected into a [`RecordFactory`][steadyloop.records.RecordFactory]; the deterministic ones make notebooks and tests repeatable.",
                "注入 [`RecordFactory`][steadyloop.records.RecordFactory] 使用；确定性的实现让笔记本和测试每次结果相同。",
                ["Clock", "SystemClock", "StepClock", "IdSource", "RandomIds", "SequentialIds"],
            ),
        ],
    ),
    "sessions": Package(
        intro_en="Sessions: events, scoped state (session, `user:`, `app:`, `temp:`), memory and summaries, as a fold over the journal.",
        intro_zh="会话：事件、分作用域的状态（会话、`user:`、`app:`、`temp:`）、记忆和摘要，全部由日志折叠而来。",
        groups=[
            Group(
                "sessions",
                "Sessions and events",
                "会话与事件",
                "",
                "",
                [
                    "SessionService",
                    "Session",
                    "Event",
                    "TextPart",
                    "ToolCallPart",
                    "ToolResultPart",
                    "Part",
                    "part_from_dict",
                ],
            ),
            Group("state", "State scopes", "状态作用域", "", "", ["SCOPES", "Scope", "key_scope"]),
            Group(
                "summaries",
                "Summaries and what the model sees",
                "摘要与模型看到的内容",
                "",
                "",
                ["Summary", "SessionContext"],
            ),
            Group(
                "memory",
                "Memory",
                "记忆",
                "",
                "",
                ["MemoryEntry", "MemoryHit", "tokenize", "normalize"],
            ),
            Group(
                "errors",
                "Errors",
                "错误",
                "",
                "",
                ["SessionError", "SessionExists", "SessionNotFound"],
            ),
            Group(
                "streams",
                "Streams and record kinds",
                "流与记录类型",
                "How sessions are laid out in the journal, for tools that read it directly.",
                "会话在日志中的存放方式，供直接读取日志的工具使用。",
                [
                    "fold_session",
                    "session_stream",
                    "user_stream",
                    "app_stream",
                    "memory_stream",
                    "parse_session_stream",
                    "KIND_CREATED",
                    "KIND_EVENT",
                    "KIND_STATE_DELTA",
                    "KIND_SUMMARY_BEGIN",
                    "KIND_SUMMARY_COMMIT",
                    "KIND_SNAPSHOT",
                    "KIND_MEMORY_ENTRY",
                    "RECORD_KINDS",
                ],
            ),
        ],
    ),
    "loop": Package(
        intro_en="The agent loop: `run`, `resume` and `resolve`, tools with replay policies, budgets, stop reasons, and the model clients. See [Crash-resume](../../explanation/crash-resume.md) for how they fit together.",
        intro_zh="智能体循环：`run`、`resume` 和 `resolve`，带重复执行策略的工具、预算、停止原因，以及模型客户端。它们如何配合，见[崩溃恢复](../../explanation/crash-resume.md)。",
        groups=[
            Group(
                "running",
                "Running an agent",
                "运行智能体",
                "",
                "",
                ["run", "resume", "resolve", "Agent", "Budgets", "RunResult", "StopReason"],
            ),
            Group(
                "tools",
                "Tools",
                "工具",
                "",
                "",
                ["ToolRegistry", "Tool", "ReplayPolicy", "ToolContext", "ToolSpec"],
            ),
            Group(
                "decisions",
                "Deciding an open intent",
                "裁定未决意图",
                "What [`resolve`][steadyloop.loop.resolve] records about an effect whose outcome is unknown.",
                "[`resolve`][steadyloop.loop.resolve] 为结果不明的副作用记下的裁定。",
                ["Happened", "NotHappened"],
            ),
            Group(
                "models",
                "Models",
                "模型",
                "",
                "",
                [
                    "ModelClient",
                    "ModelReply",
                    "ScriptedModel",
                    "OpenAIChatModel",
                    "Message",
                    "ToolCall",
                ],
            ),
            Group(
                "parsing",
                "Reading a model's reply",
                "解析模型回复",
                "",
                "",
                [
                    "DecisionParser",
                    "ToolCallParser",
                    "Decision",
                    "FinalAnswer",
                    "ToolCalls",
                    "ParseFailure",
                ],
            ),
            Group(
                "inspecting",
                "Inspecting and stopping runs",
                "查看与停止运行",
                "",
                "",
                [
                    "list_runs",
                    "run_keys",
                    "load_run",
                    "RunInfo",
                    "request_cancel",
                    "load_agent",
                    "SignalStop",
                    "check_session_copies",
                    "Mismatch",
                ],
            ),
            Group(
                "run-streams",
                "Run streams and record kinds",
                "运行流与记录类型",
                "How a run is laid out in the journal, for tools that read it directly.",
                "一次运行在日志中的存放方式，供直接读取日志的工具使用。",
                [
                    "RunState",
                    "Owner",
                    "run_stream",
                    "parse_run_stream",
                    "event_messages",
                    "session_messages",
                    "RUN_STARTED",
                    "RUN_CLAIMED",
                    "RUN_SUSPENDED",
                    "RUN_CANCEL_REQUESTED",
                    "RUN_ENDED",
                    "RUN_RECORD_KINDS",
                    "LOOP_AUTHOR",
                    "TOOL_AUTHOR",
                    "USER_AUTHOR",
                    "RUN_STOPPED",
                    "RUN_SNAPSHOT",
                ],
            ),
        ],
    ),
    "audit": Package(
        intro_en="The audit loop: the task board, workers, executors, the verifier, the auditor and its judges, packets and preambles, and the queues behind the board. See [The audit loop](../../explanation/audit-loop.md).",
        intro_zh="审计循环：任务看板、worker、执行器、校验器、审计器及其评判器、反馈包与前置说明，以及看板背后的队列。见[审计循环](../../explanation/audit-loop.md)。",
        groups=[
            Group(
                "tasks",
                "Tasks and the board",
                "任务与看板",
                "",
                "",
                [
                    "TaskBoard",
                    "TaskSpec",
                    "GoalSpec",
                    "VerifySpec",
                    "SubmitResult",
                    "TaskStatus",
                    "TaskState",
                    "TaskEvent",
                    "TERMINAL",
                    "TRANSITIONS",
                    "task_stream",
                    "check_dependencies",
                    "DEFAULT_APP",
                ],
            ),
            Group(
                "workers",
                "Workers",
                "Worker",
                "",
                "",
                [
                    "Worker",
                    "WorkerEvent",
                    "TaskContext",
                    "AgentFactory",
                    "DEFAULT_ROUND_BUDGET",
                    "DEFAULT_GRACE",
                    "DEFAULT_ROUND_TIME",
                ],
            ),
            Group(
                "verification",
                "Verification and executors",
                "校验与执行器",
                "",
                "",
                [
                    "Verifier",
                    "Verification",
                    "Executor",
                    "SubprocessExecutor",
                    "InProcessExecutor",
                    "CommandResult",
                    "DEFAULT_ENV_ALLOW",
                    "DEFAULT_MAX_OUTPUT",
                    "cap_text",
                    "BubblewrapExecutor",
                    "ExecutorUnavailable",
                ],
            ),
            Group(
                "auditor",
                "The auditor and its judges",
                "审计器与评判器",
                "",
                "",
                [
                    "Auditor",
                    "AuditContext",
                    "AuditReport",
                    "Finding",
                    "FindingKind",
                    "Gate",
                    "Severity",
                    "Judge",
                    "RulesJudge",
                    "Rule",
                    "ModelJudge",
                    "decide",
                    "DEFAULT_AUDIT_ROUNDS",
                    "DEFAULT_EVIDENCE_LIMIT",
                ],
            ),
            Group(
                "packets",
                "Packets and preambles",
                "反馈包与前置说明",
                "",
                "",
                [
                    "Packet",
                    "compose_preamble",
                    "apply_preamble",
                    "apply_to_messages",
                    "count_preambles",
                    "PreambleModel",
                    "PREAMBLE_OPEN",
                    "PREAMBLE_CLOSE",
                ],
            ),
            Group(
                "errors",
                "Errors",
                "错误",
                "",
                "",
                ["AuditError", "TaskSpecError", "IllegalTransition", "LeaseLost", "TaskNotFound"],
            ),
            Group(
                "queues",
                "Queues, for backend authors",
                "队列（供后端作者参考）",
                "The board keeps its tasks in a queue; these are the queue protocol and its two implementations.",
                "看板把任务放在队列里；下面是队列协议及其两种实现。",
                [
                    "TaskQueue",
                    "SQLiteQueue",
                    "PostgresQueue",
                    "open_queue",
                    "QueuedTask",
                    "UnreadableTask",
                    "Claim",
                    "MySQLQueue",
                ],
            ),
        ],
    ),
    "replay": Package(
        intro_en="The replay harness: the case loader, backends, snapshots, normalisation, the diff engine and the report. See [Replay-diff](../../explanation/replay-diff.md). `steadyloop.replay` is this package; the function that runs a replay is [`steadyloop.replay.replay`][steadyloop.replay.replay]. A replay runs load → drive → snapshot → diff → report, each stage calling only the next (see [How a replay flows](../../contributing.md#how-a-replay-flows)).",
        intro_zh="回放比对工具：用例加载器、后端、快照、规范化、比对引擎和报告。见[回放比对](../../explanation/replay-diff.md)。`steadyloop.replay` 就是这个包，执行回放的函数是 [`steadyloop.replay.replay`][steadyloop.replay.replay]。一次回放依次经过加载 → 驱动 → 快照 → 比对 → 报告，每个阶段只调用下一个（见[回放的流向](../../contributing.md#how-a-replay-flows)）。",
        groups=[
            Group(
                "running",
                "Running a replay",
                "运行回放",
                "",
                "",
                [
                    "replay",
                    "load_cases",
                    "load_case",
                    "parse_case",
                    "bundled_cases",
                    "default_backends",
                    "resolve_backends",
                    "Backend",
                    "EMBEDDED_BACKENDS",
                    "SERVER_BACKENDS",
                    "resolve_stores",
                    "temporary_backend",
                    "pack_names",
                    "pack_cases",
                ],
            ),
            Group(
                "stores",
                "Stores under test",
                "被测存储",
                "The protocol through which replay-diff drives any session store, Steadyloop's own on each journal or a framework's, and the capabilities a store declares. See [Replay-diff](../../explanation/replay-diff.md#stores-under-test).",
                "回放比对通过这套协议驱动任意会话存储（Steadyloop 自己在各种日志上的存储，或其他框架的存储），以及存储声明的各项能力。见[回放比对](../../explanation/replay-diff.md#stores-under-test)。",
                [
                    "SessionStore",
                    "Capability",
                    "StoredSession",
                    "StoreEvent",
                    "EventEdit",
                    "SessionRef",
                    "Outcome",
                    "StoreSpec",
                    "StoreOpener",
                    "without_passwords",
                    "store_opener",
                    "parse_store_url",
                    "missing_extra",
                    "MissingExtra",
                    "STORE_ENTRY_POINT_GROUP",
                    "JournalStore",
                    "JOURNAL_CAPABILITIES",
                    "FaultyStore",
                    "FAULTS",
                    "scope_of",
                    "SCOPE_NAMES",
                    "us_to_seconds",
                    "seconds_to_us",
                    "MAX_CASE_TIME_US",
                ],
            ),
            Group(
                "cases",
                "Cases",
                "用例",
                "",
                "",
                [
                    "Case",
                    "CaseHeader",
                    "Operation",
                    "AllowedDiff",
                    "CaseError",
                    "case_schema",
                    "case_record_adapter",
                    "required_capabilities",
                    "steadyloop_limits",
                    "check_steadyloop_limits",
                ],
            ),
            Group(
                "reports",
                "Reports",
                "报告",
                "",
                "",
                [
                    "Report",
                    "CaseReport",
                    "CaseRun",
                    "Snapshot",
                    "SECTIONS",
                    "DifferenceEntry",
                    "Difference",
                    "report_schema",
                    "build_report",
                    "compare_case",
                    "run_case",
                    "REPORT_DOMAINS",
                    "DOMAINS",
                    "SCHEMA_VERSION",
                    "choose_references",
                    "known_store_names",
                ],
            ),
            Group(
                "normalising",
                "Normalising and diffing",
                "规范化与比对",
                "",
                "",
                [
                    "Normaliser",
                    "normalise_text",
                    "diff",
                    "diff_subset",
                    "align_ties",
                    "plain",
                    "JSONBool",
                    "JSONFloat",
                    "MISSING",
                    "CLOCK_START",
                    "CLOCK_STEP",
                    "ERROR_NAMES",
                ],
            ),
        ],
    ),
    "effects": Package(
        intro_en="The effect ledger: what an effect's intent and result mean, in one layer below the agent loop and the guards. It owns the replay policy, the states of an effect (open, happened, raised, not happened, decided by whom), begin / finish / fail / decide, and the owner of an open intent. See [Guard the tools of an existing agent](../../how-to/guard-existing-agents.md).",
        intro_zh="副作用账本：副作用的意图和结果各自意味着什么，集中在智能体循环和各种防护之下的一层里。它负责重复执行策略、副作用的各种状态（未决、已发生、抛出异常、未发生、由谁裁定）、begin / finish / fail / decide，以及未决意图的属主。见[为现有智能体的工具加上防护](../../how-to/guard-existing-agents.md)。",
        groups=[
            Group(
                "ledger",
                "The ledger",
                "账本",
                "",
                "",
                [
                    "EffectLedger",
                    "Begun",
                    "Recorded",
                    "Unknown",
                    "acting",
                    "current_intent",
                    "describe",
                ],
            ),
            Group(
                "outcomes",
                "Policies, statuses and decisions",
                "策略、状态与裁定",
                "The vocabulary the loop driver writes its run streams with, too.",
                "智能体循环写运行流时用的也是这套词汇。",
                [
                    "ReplayPolicy",
                    "Happened",
                    "NotHappened",
                    "decision_from",
                    "decision_payload",
                    "interrupted",
                    "DONE_STATUSES",
                    "REDO_STATUSES",
                ],
            ),
            Group(
                "owners",
                "Owners",
                "属主",
                "Who runs an open intent, told alive or dead from the process table, with no renewal writes.",
                "谁在执行一个未决意图；通过进程表判断其存活与否，无需续租写入。",
                ["Owner", "Liveness", "LIVE_TOKENS"],
            ),
        ],
    ),
    "integrations": Package(
        intro_en="Guards that put intent before effect into the tools of agents built on other runtimes, without changing the runtime: [`LangGraphGuard`][steadyloop.integrations.langgraph.LangGraphGuard] for LangGraph (extra `langgraph`), [`AgentsGuard`][steadyloop.integrations.openai_agents.AgentsGuard] for the OpenAI Agents SDK (extra `openai-agents`) and [`PydanticAIGuard`][steadyloop.integrations.pydantic_ai.PydanticAIGuard] for Pydantic AI (extra `pydantic-ai`). See [Guard the tools of an existing agent](../../how-to/guard-existing-agents.md).",
        intro_zh="给基于其他运行时构建的智能体的工具加上“先写意图，再做副作用”的防护，而不改动运行时本身：LangGraph 用 [`LangGraphGuard`][steadyloop.integrations.langgraph.LangGraphGuard]（extra `langgraph`），OpenAI Agents SDK 用 [`AgentsGuard`][steadyloop.integrations.openai_agents.AgentsGuard]（extra `openai-agents`），Pydantic AI 用 [`PydanticAIGuard`][steadyloop.integrations.pydantic_ai.PydanticAIGuard]（extra `pydantic-ai`）。见[为现有智能体的工具加上防护](../../how-to/guard-existing-agents.md)。",
        groups=[
            Group(
                "guards",
                "The guards",
                "防护",
                "",
                "",
                [
                    "langgraph.LangGraphGuard",
                    "openai_agents.AgentsGuard",
                    "pydantic_ai.PydanticAIGuard",
                    "pydantic_ai.call_position",
                    "Guard",
                ],
            ),
            Group(
                "records",
                "For the guarded function",
                "供受防护的函数使用",
                "A guard keeps its effects in the [effect ledger](effects.md); these two are what the code a guard runs needs from it.",
                "防护把副作用记在[副作用账本](effects.md)里；受防护的代码需要从中用到的，是这两个。",
                ["decision_from", "current_intent"],
            ),
            Group(
                "errors",
                "Errors",
                "错误",
                "",
                "",
                ["GuardError", "EffectBusy", "EffectFailed"],
            ),
        ],
    ),
    "testing": Package(
        intro_en="Public test kits for your own backends and agents: the journal conformance suite, the fault-injecting file layer and the crash matrix. See [Write a backend](../../how-to/write-a-backend.md).",
        intro_zh="给你自己的后端和智能体用的公开测试套件：日志一致性测试、可注入故障的文件层，以及崩溃矩阵。见[编写后端并运行一致性测试](../../how-to/write-a-backend.md)。",
        groups=[
            Group(
                "conformance",
                "The conformance suite",
                "一致性测试",
                "",
                "",
                [
                    "JournalConformance",
                    "JournalFactory",
                    "ADVERSARIAL_PAYLOADS",
                    "QueueConformance",
                    "QueueFactory",
                ],
            ),
            Group(
                "faults",
                "Fault injection",
                "故障注入",
                "",
                "",
                [
                    "FaultyFiles",
                    "SimulatedCrash",
                    "CrashingJournal",
                    "EffectSink",
                    "Repeat",
                    "abandon",
                ],
            ),
            Group(
                "crash-matrix",
                "The crash matrix",
                "崩溃矩阵",
                "",
                "",
                ["crash_matrix", "CrashCase", "CrashMatrixReport"],
            ),
            Group(
                "other-runtimes",
                "Crash kits for other runtimes",
                "其他运行时的崩溃测试工具包",
                "",
                "",
                [
                    "agents_crash_matrix",
                    "AgentProcess",
                    "pydantic_crash_matrix",
                    "pydantic_aimed_kills",
                    "PydanticProcess",
                    "AimedKills",
                    "langgraph_crash_matrix",
                    "GraphProcess",
                    "KitProcess",
                    "ProcessCheckpointer",
                    "ProcessDeath",
                    "ProcessJournal",
                    "CrashPoint",
                    "FrameworkCrashReport",
                ],
            ),
        ],
    ),
    "faults": Package(
        intro_en="The one fault layer every crash kit configures: where a fault happens (the labelled write boundaries of a simulated process, or a named point), how (a simulated death, a real `SIGKILL`, `ENOSPC` or `EIO`, a dropped connection), the journal and file layers that pass their writes through it, a loopback TCP proxy that stalls, lags and resets connections, and a network namespace whose route can be blackholed. See [Contributing](../../contributing.md#fault-layer).",
        intro_zh="每个崩溃测试工具包都配置的那一个故障层：故障发生在哪里（模拟进程带标签的写入边界，或一个具名的点）、怎样发生（模拟的进程死亡、真实的 `SIGKILL`、`ENOSPC` 或 `EIO`、连接断开），让写入经过它的日志层和文件层，一个在回环地址上让连接停顿、变慢和被重置的 TCP 代理，以及一个路由可以被黑洞化的网络命名空间。见[参与开发](../../contributing.md#fault-layer)。",
        groups=[
            Group(
                "where-and-how",
                "Where and how",
                "在哪里、怎样发生",
                "",
                "",
                [
                    "FaultPlan",
                    "Fault",
                    "Fired",
                    "SimulatedCrash",
                    "SimulatedDisconnect",
                    "Side",
                    "How",
                ],
            ),
            Group(
                "layers",
                "The layers that pass through a plan",
                "经过故障计划的各层",
                "",
                "",
                ["FaultyJournal", "FaultyFiles"],
            ),
            Group(
                "network",
                "Network faults",
                "网络故障",
                "",
                "",
                ["FaultProxy", "Latency", "Blackhole"],
            ),
        ],
    ),
}

# One-line Chinese summaries of the index rows (English ones come from the docstrings).
SUMMARIES_ZH = {
    "Journal": "只追加的记录日志，记录按命名空间分组存放在各个流中。",
    "StreamWrite": "一个批次中写入某一个流的那部分。",
    "AppendResult": "一个批次写到了哪里。",
    "open_journal": "打开 URL 所指的日志。",
    "Record": "一条不可变的日志记录，保持写入方创建时的样子。",
    "StoredRecord": "日志中保存的记录：带有所属的流和序号。",
    "RecordFactory": "用注入的时钟和 id 来源创建记录。",
    "canonical_json": "把值编码为规范 JSON 文本。",
    "SystemClock": "系统时钟，单位为微秒。",
    "StepClock": "确定性时钟，每读一次前进固定步长。",
    "SequentialIds": "确定性 id：`{prefix}-000001`、`{prefix}-000002`……用于测试和笔记本。",
    "SessionService": "一个应用的所有会话，存放在以该应用命名的日志命名空间中。",
    "Session": "由日志中各个流折叠得到的会话。",
    "Event": "会话中的一个事件：谁说了什么、做了什么，改动了哪些状态。",
    "TextPart": "纯文本。",
    "ToolCallPart": "一次工具调用请求。",
    "ToolResultPart": "一次工具调用的结果。",
    "run": "开始一次运行：把用户的 `input` 写入会话，然后逐步执行，直到出现停止原因。",
    "resume": "根据日志继续一次运行。",
    "resolve": "对一个没有结果的意图记下调用方的裁定。",
    "Agent": "定义一个智能体所需的一切：模型、工具、提示词和预算。",
    "Budgets": "对一次运行的各项限制。",
    "ToolRegistry": "智能体的工具集，每个工具带有自己的重复执行策略。",
    "ReplayPolicy": "意图已持久化、结果却没有写下的副作用，恢复时可以怎样处理。",
    "RunResult": "一次运行如何停下。",
    "StopReason": "一次运行为什么停下。",
    "Happened": "调用方的裁定：副作用已经发生，结果如下。",
    "NotHappened": "调用方的裁定：副作用没有发生，恢复时重新执行。",
    "ModelReply": "模型调用返回的原始内容，尚未解读。",
    "ScriptedModel": "按调用次序作答的确定性模型，用于测试和笔记本。",
    "OpenAIChatModel": "兼容 OpenAI chat-completions 接口、支持工具调用的客户端。",
    "TaskBoard": "任务看板：一个供认领任务的队列，外加每个任务在日志中的轨迹。",
    "TaskSpec": "提交的内容：要做的工作、执行顺序，以及如何检查。",
    "GoalSpec": "目标模式：每轮结束后运行校验命令。",
    "VerifySpec": "判断目标是否达成的命令：退出码为 0 即通过。",
    "TaskStatus": "任务所处的状态。",
    "Worker": "从看板认领任务并处理，每认领一次做一轮。",
    "Auditor": "把一轮各道关卡的检查结果整理成审计问题。",
    "load_cases": "加载并检查用例文件（给出目录时，加载其中所有 `*.jsonl`）。",
    "replay": "在每个后端上运行每个用例，比较结果并给出报告。",
    "SteadyloopError": "Steadyloop 有意抛出的所有错误的基类。",
    "JournalError": "所有日志错误的基类，无论由哪个后端抛出。",
    "EncodingError": "值无法按规范编码。",
    "UnknownBackend": "日志 URL 指定的协议没有后端处理，或 URL 格式有误。",
    "InvalidBatch": "批次格式有误（为空、同一个流出现两次、名称不合法），没有写入任何内容。",
    "ConflictError": "流的下一个序号与调用方预期的不一致。",
    "IdempotencyKeyReused": "同一个幂等键被用于另一个不同的批次。",
    "CorruptionError": "存储的数据已损坏：某行无法解析、批次缺少成员、某行数据有误。",
    "BackendUnavailable": "后端无法连接，或在操作中途出错。",
    "JournalLocked": "另一个写入方持有该流（或该流所在的文件）。",
    "JournalClosed": "日志在 `close` 之后仍被使用。",
    "SessionError": "会话错误的基类（事件有误、状态键有误、摘要失败）。",
    "SessionExists": "该应用、用户和 id 对应的会话已经存在，没有写入任何内容。",
    "SessionNotFound": "找不到该应用、用户和 id 对应的会话。",
    "LoopError": "运行或恢复智能体循环时出错的基类。",
    "ModelError": "模型调用失败：接口拒绝、反复出错，或回复无法理解。",
    "RunNotFound": "日志中没有这个 id 的运行。",
    "RunFinished": "这次运行已经结束（运行结束记录已写入），不能再恢复。",
    "RunBusy": "另一个进程（或任务）正在驱动这次运行。",
    "AgentLoadError": "以 `module:attribute` 形式给出的智能体无法导入，或导入的不是智能体。",
    "AuditError": "审计循环错误的基类（任务规格、任务状态机、租约、评判器）。",
    "TaskSpecError": "任务规格无效，或与队列中已有的内容冲突，没有提交任何内容。",
    "IllegalTransition": "任务事件与任务当前状态不符，没有写入任何内容。",
    "LeaseLost": "worker 对任务的租约已过期或被接管，必须停止处理该任务。",
    "TaskNotFound": "队列中没有这个 id 的任务。",
    "CaseError": "回放用例文件无效，其中的内容一概没有运行。",
    "StoreNotFound": "只为查看而打开（`create=False`）时，URL 处没有存储，什么也没有创建。",
    "TaskCancelled": "有人要求取消一个正在运行的任务（`audit cancel`）。",
    "ToolTimeout": "工具调用超过了工具的 `timeout`，已被放弃。",
    "EffectBusy": "同一个受防护副作用的另一次执行正在进行，并且先写下了意图。",
    "EffectFailed": "一个受防护的 `NEVER` 副作用已经执行过并且失败了，再次抛出记录下来的错误。",
    "GuardError": "给其他运行时的工具加的防护被误用，或者收到了格式错误的裁定。",
    "MissingExtra": "某个后端或存储需要的可选依赖（extra）没有安装。",
    "ExecutorUnavailable": "执行器无法在这里运行（缺少 bubblewrap，或系统禁止创建命名空间）。",
}

INDEX_SECTIONS = [  # (id, English heading, Chinese heading, the packages whose names it lists)
    ("records-and-the-journal", "Records and the journal", "记录与日志", ["journal", "records"]),
    ("sessions", "Sessions", "会话", ["sessions"]),
    ("the-agent-loop", "The agent loop", "智能体循环", ["loop"]),
    ("the-audit-loop", "The audit loop", "审计循环", ["audit"]),
    ("replay-diff", "Replay-diff", "回放比对", ["replay"]),
]

PAGE_SUMMARIES = {  # the index's first table: page -> (English, Chinese)
    "records": (
        "Records, canonical JSON, clocks and id sources",
        "记录、规范 JSON、时钟与 id 来源",
    ),
    "journal": (
        "The journal contract, opening a journal by URL, the bundled backends, helpers for backend authors",
        "日志约定、按 URL 打开日志、自带后端、给后端作者的辅助工具",
    ),
    "sessions": (
        "Sessions, events, scoped state, memory and summaries",
        "会话、事件、分作用域的状态、记忆与摘要",
    ),
    "loop": (
        "Running, resuming and resolving agent runs; tools, models, budgets",
        "运行、恢复与裁定智能体运行；工具、模型、预算",
    ),
    "audit": (
        "The task board, workers, verification, the auditor and its judges, queues",
        "任务看板、worker、校验、审计器及其评判器、队列",
    ),
    "replay": (
        "Replay cases across backends, normalise snapshots, diff and report",
        "在多个后端上回放用例、规范化快照、比对并出报告",
    ),
    "effects": (
        "The effect ledger: intents, results, decisions and owners of effects",
        "副作用账本：副作用的意图、结果、裁定与属主",
    ),
    "integrations": (
        "Guards for the tools of LangGraph and OpenAI Agents SDK agents",
        "为 LangGraph 和 OpenAI Agents SDK 智能体的工具加上的防护",
    ),
    "testing": (
        "Conformance suite, fault injection and the crash matrix for your own backends",
        "给你自己的后端用的一致性测试、故障注入和崩溃矩阵",
    ),
    "faults": (
        "The one fault layer: crash points, disk errors, a faulty journal and file layer, a TCP proxy",
        "唯一的故障层：崩溃点、磁盘错误、会出故障的日志层和文件层、TCP 代理",
    ),
    "errors": ("Every error class, in one hierarchy", "所有错误类，同属一个层级"),
}


def _block(path: str, heading_level: int) -> str:
    return (
        f"::: {path}\n    options:\n      heading_level: {heading_level}\n"
        "      show_root_full_path: false\n"
    )


def groups(package: str) -> list[Group]:
    """The package page's groups, with every unplaced export in a last "Other names" group."""
    spec = PACKAGES[package]
    exports = list(importlib.import_module(f"steadyloop.{package}").__all__)
    placed = [
        g.__class__(
            g.id,
            g.en,
            g.zh,
            g.intro_en,
            g.intro_zh,
            # A dotted name is an export of a public submodule ("langgraph.LangGraphGuard").
            [n for n in g.names if n in exports or "." in n],
        )
        for g in spec.groups
    ]
    named = {n for g in placed for n in g.names}
    rest = [n for n in exports if n not in named]
    placed = [g for g in placed if g.names]
    if rest:
        placed.append(Group(OTHER[0], OTHER[1], OTHER[2], "", "", rest))
    return placed


def package_page(package: str, lang: str) -> str:
    """The Markdown of one package page."""
    spec = PACKAGES[package]
    colon = ": " if lang == "en" else "："
    out = [
        f"# Python API{colon}`steadyloop.{package}`",
        "",
        f"[](){{#steadyloop.{package}}}",
        "",
        spec.intro_en if lang == "en" else spec.intro_zh,
        "",
        f"::: steadyloop.{package}\n    options:\n      show_root_heading: false\n"
        "      show_root_toc_entry: false\n      members: false\n",
    ]
    for group in groups(package):
        out += [f"## {group.en if lang == 'en' else group.zh} {{#{group.id}}}", ""]
        intro = group.intro_en if lang == "en" else group.intro_zh
        if intro:
            out += [intro, ""]
        out += [_block(f"steadyloop.{package}.{name}", 3) for name in group.names]
    return "\n".join(out).rstrip() + "\n"


def summary(obj: object) -> str:
    """The first sentence of an object's docstring, as one table cell."""
    text = (inspect.getdoc(obj) or "").split("\n\n")[0].replace("\n", " ")
    if len(text) > 110:
        text = re.split(r"(?<=[.;:])\s", text)[0]
    text = text.replace("``", "`")
    return re.sub(r"\[(`[^`]+`)\]\[[^\]]+\]", r"\1", text).replace("|", "\\|")


def error_names() -> list[str]:
    """``steadyloop._errors.__all__`` in definition order (the hierarchy reads top down)."""
    errors = importlib.import_module("steadyloop._errors")
    return [name for name in vars(errors) if name in errors.__all__]


def home(name: str) -> str | None:
    """The package page that documents a top-level name (``None`` for errors)."""
    for _id, _en, _zh, packages in INDEX_SECTIONS:
        for package in packages:
            if name in importlib.import_module(f"steadyloop.{package}").__all__:
                return package
    return None


def index_page(lang: str) -> str:
    """The Markdown of the API index: the pages, then every top-level name with its summary."""
    import steadyloop

    zh = lang == "zh"
    errors = set(error_names())
    names = [n for n in steadyloop.__all__ if n != "__version__"]
    out = ["# Python API" + ("：" if zh else ": ") + "`steadyloop`", ""]
    if zh:
        out += [
            "`steadyloop.__all__` 中列出的名字都受支持，可以直接从 `steadyloop` 导入；下面每个名字都链接到它在分包页面上的说明。各分包页面按层完整记录各自的 API，先讲约定，再讲给后端作者的辅助工具。API 说明取自源代码中的文档字符串，因此保留英文原文。",
            "",
            "| 页面 | 内容 |",
            "|---|---|",
        ]
    else:
        out += [
            "Every name in `steadyloop.__all__` is supported and can be imported from `steadyloop` directly; each links below to its entry on the page of the package that defines it. Those pages document each layer in full, the contract first and the helpers for backend authors after.",
            "",
            "| page | what it documents |",
            "|---|---|",
        ]
    for page, (en, zhs) in PAGE_SUMMARIES.items():
        label = ("错误类" if zh else "errors") if page == "errors" else f"`steadyloop.{page}`"
        out.append(f"| [{label}]({page}.md) | {zhs if zh else en} |")
    out += [
        "",
        "## " + ("`steadyloop` 导出的名字" if zh else "What `steadyloop` exports") + " {#exports}",
        "",
    ]
    out += [
        "版本号在 `steadyloop.__version__` 中。"
        if zh
        else "The version is in `steadyloop.__version__`.",
        "",
    ]
    header = ["| 名字 | 说明 |" if zh else "| name | what it is |", "|---|---|"]
    rows: dict[str, list[str]] = {}
    for name in names:
        if name in errors:
            continue
        package = home(name)
        if package is None:
            raise SystemExit(
                f"steadyloop.{name} is on no package page: add it to a package's __all__"
            )
        rows.setdefault(package, []).append(name)
    for section_id, en, zhs, packages in INDEX_SECTIONS:
        out += [f"### {zhs if zh else en} {{#{section_id}}}", "", *header]
        for package in packages:
            for name in rows.get(package, []):
                text = SUMMARIES_ZH.get(name) if zh else None
                out.append(
                    f"| [`{name}`][steadyloop.{package}.{name}] | {text or summary(getattr(steadyloop, name))} |"
                )
        out.append("")
    out += ["### " + ("错误" if zh else "Errors") + " {#errors}", ""]
    out += [
        "每个错误的触发时机和处理办法见[错误](../errors.md)。"
        if zh
        else "When each is raised, and what to do about it: [Errors](../errors.md).",
        "",
        *header,
    ]
    for name in error_names():
        if name in names:
            text = SUMMARIES_ZH.get(name) if zh else None
            out.append(
                f"| [`{name}`][steadyloop.{name}] | {text or summary(getattr(steadyloop, name))} |"
            )
    return "\n".join(out).rstrip() + "\n"


def errors_page(lang: str) -> str:
    """The Markdown of the errors page: every error class, in definition order."""
    zh = lang == "zh"
    out = ["# Python API" + ("：错误类" if zh else ": errors"), ""]
    out += [
        "所有错误类同属一个层级，都可以直接从 `steadyloop` 导入。它们的触发时机、会不会留下写了一半的数据以及处理办法，见[错误](../errors.md)。"
        if zh
        else "Every error class, in one hierarchy; each can be imported from `steadyloop` directly. When each is raised, whether anything was written, and what to do: [Errors](../errors.md).",
        "",
    ]
    out += [_block(f"steadyloop.{name}", 2) for name in error_names()]
    return "\n".join(out).rstrip() + "\n"


def pages() -> dict[Path, str]:
    """Every generated page: its path under ``docs/`` and its text."""
    out: dict[Path, str] = {}
    for lang in LANGUAGES:
        for package in PACKAGES:
            out[Path(lang) / API / f"{package}.md"] = package_page(package, lang)
        out[Path(lang) / API / "index.md"] = index_page(lang)
        out[Path(lang) / API / "errors.md"] = errors_page(lang)
    return out


def main() -> int:
    """Write the pages; with ``--check``, only report which ones are out of date."""
    check = "--check" in sys.argv[1:]
    stale = []
    for rel, text in pages().items():
        path = ROOT / "docs" / rel
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            stale.append(rel.as_posix())
            if not check:
                path.write_text(text, encoding="utf-8")
    verb = "out of date" if check else "rewritten"
    print(f"{len(stale)} API page(s) {verb}" + (": " + ", ".join(stale) if stale else ""))
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
