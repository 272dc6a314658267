"""The auditor: gates turned into findings, and pluggable judges.

Three gates look at a finished round:

* **execution** — did the run end with a final answer? (deterministic)
* **verification** — in goal mode, did the verify command pass? (deterministic)
* **judgement** — what the judges say: a [`RulesJudge`][steadyloop.audit.RulesJudge]
  (deterministic rules) and a [`ModelJudge`][steadyloop.audit.ModelJudge] (a model reads the
  work and answers in JSON).

Each problem becomes a [`Finding`][steadyloop.audit.Finding] with an id, a severity, evidence,
how to reproduce it, what would count as fixed (acceptance), its kind and its gate. A round
passes when it has no finding above ``info``.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from steadyloop._errors import AuditError, ModelError
from steadyloop.audit._tasks import TaskSpec
from steadyloop.audit._verify import Verification
from steadyloop.loop import Message, ModelClient, RunResult, StopReason
from steadyloop.records import JSONValue

__all__ = [
    "AuditContext",
    "AuditReport",
    "Auditor",
    "Finding",
    "FindingKind",
    "Gate",
    "Judge",
    "ModelJudge",
    "Rule",
    "RulesJudge",
    "Severity",
]


class Severity(enum.StrEnum):
    """How much a finding matters. Anything above ``info`` pushes the task back."""

    BLOCKER = "blocker"
    MAJOR = "major"
    MINOR = "minor"
    INFO = "info"


class FindingKind(enum.StrEnum):
    """Whether a finding is a checked fact or an opinion."""

    DETERMINISTIC = "deterministic"
    JUDGEMENT = "judgement"


class Gate(enum.StrEnum):
    """Which gate raised a finding."""

    EXECUTION = "execution"
    VERIFICATION = "verification"
    JUDGEMENT = "judgement"


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem the audit found.

    Attributes:
        id: Unique within the task (``r<round>.<gate>.<n>``).
        severity: How much it matters.
        evidence: What was seen (capped command output, the run's stop reason, …).
        reproduction: How to see it yourself.
        acceptance: What counts as fixed.
        kind: Deterministic (a checked fact) or judgement (an opinion).
        gate: Which gate raised it.
        title: A short name for it.
    """

    id: str
    severity: Severity
    evidence: str
    reproduction: str
    acceptance: str
    kind: FindingKind
    gate: Gate
    title: str = ""

    @property
    def blocking(self) -> bool:
        """Whether it pushes the task back (anything above ``info``)."""
        return self.severity is not Severity.INFO

    def to_json(self) -> dict[str, JSONValue]:
        """Return the finding as a JSON object."""
        return {
            "id": self.id,
            "severity": self.severity.value,
            "evidence": self.evidence,
            "reproduction": self.reproduction,
            "acceptance": self.acceptance,
            "kind": self.kind.value,
            "gate": self.gate.value,
            "title": self.title,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Finding:
        """Rebuild a finding from [`to_json`][steadyloop.audit.Finding.to_json] output."""
        return cls(
            id=str(data["id"]),
            severity=Severity(data["severity"]),
            evidence=str(data.get("evidence", "")),
            reproduction=str(data.get("reproduction", "")),
            acceptance=str(data.get("acceptance", "")),
            kind=FindingKind(data["kind"]),
            gate=Gate(data["gate"]),
            title=str(data.get("title", "")),
        )


@dataclass(frozen=True)
class AuditContext:
    """Everything the auditor and its judges may look at for one round.

    Attributes:
        task_id: The task.
        spec: Its spec.
        round: The round being audited.
        audit_round: Which audit this is (1 for the first).
        run: How the round's run ended.
        verification: The verify command's outcome (goal mode).
        workdir: Where the task worked.
        app: The journal namespace (for reproduction hints).
        run_id: The round's run.
    """

    task_id: str
    spec: TaskSpec
    round: int
    audit_round: int
    run: RunResult
    verification: Verification | None = None
    workdir: str = ""
    app: str = "audit"
    run_id: str = ""


@runtime_checkable
class Judge(Protocol):
    """A judge for the judgement gate: looks at a round, returns findings.

    Return [`Finding`][steadyloop.audit.Finding] objects; their ``id`` and ``gate`` are replaced
    by the auditor's numbering. Raise [`AuditError`][steadyloop.audit.AuditError] if the judge
    cannot judge.
    """

    name: str

    async def judge(self, context: AuditContext) -> Sequence[Finding]:
        """Return the findings for one round (empty: nothing wrong)."""
        ...


@dataclass(frozen=True)
class Rule:
    """A deterministic rule for [`RulesJudge`][steadyloop.audit.RulesJudge].

    Attributes:
        name: A short name (the finding's title).
        check: Returns evidence (a sentence) when the rule is broken, else ``None``.
        acceptance: What counts as fixed.
        severity: The finding's severity.
        reproduction: How to check it yourself.
    """

    name: str
    check: Callable[[AuditContext], str | None]
    acceptance: str
    severity: Severity = Severity.MAJOR
    reproduction: str = ""

    @classmethod
    def output_contains(cls, text: str, *, severity: Severity = Severity.MAJOR) -> Rule:
        """The run's final answer must contain ``text``."""

        def check(ctx: AuditContext) -> str | None:
            output = ctx.run.output or ""
            if text in output:
                return None
            return f"the final answer does not contain {text!r}: {output[:300]!r}"

        return cls(
            f"answer mentions {text!r}", check, f"the final answer contains {text!r}", severity
        )

    @classmethod
    def output_lacks(cls, pattern: str, *, severity: Severity = Severity.MAJOR) -> Rule:
        """The run's final answer must not match the regular expression ``pattern``."""
        compiled = re.compile(pattern)

        def check(ctx: AuditContext) -> str | None:
            match = compiled.search(ctx.run.output or "")
            if match is None:
                return None
            return f"the final answer contains {match.group(0)!r} (rule: /{pattern}/)"

        return cls(
            f"answer free of /{pattern}/",
            check,
            f"the final answer does not match /{pattern}/",
            severity,
        )


class RulesJudge:
    """A judge of deterministic rules; its findings are of kind ``deterministic``.

    Args:
        rules: The rules, checked in order.
        name: The judge's name.
    """

    def __init__(self, rules: Sequence[Rule], *, name: str = "rules") -> None:
        self.rules = tuple(rules)
        self.name = name

    async def judge(self, context: AuditContext) -> Sequence[Finding]:
        """Check every rule; one finding per broken rule."""
        out: list[Finding] = []
        for rule in self.rules:
            evidence = rule.check(context)
            if evidence is None:
                continue
            out.append(
                Finding(
                    id="",
                    severity=rule.severity,
                    evidence=evidence,
                    reproduction=rule.reproduction or f"steadyloop audit show {context.task_id}",
                    acceptance=rule.acceptance,
                    kind=FindingKind.DETERMINISTIC,
                    gate=Gate.JUDGEMENT,
                    title=rule.name,
                )
            )
        return out


_JSON_BLOCK = re.compile(r"\{.*\}", re.DOTALL)

MODEL_JUDGE_INSTRUCTIONS = (
    "You audit the work of an agent. Read the task, the agent's final answer and the "
    "verification evidence. Answer with one JSON object and nothing else: "
    '{"findings": [{"title": "...", "severity": "blocker|major|minor|info", '
    '"evidence": "what you saw", "acceptance": "what would count as fixed"}]}. '
    "An empty list means the work is acceptable."
)


class ModelJudge:
    """A judge backed by a model, over the loop's model-client protocol.

    The model is sent the task, the final answer and the verification evidence, and
    must answer with a JSON object ``{"findings": [...]}``. Its findings are of kind
    ``judgement``.

    Args:
        model: The model client.
        instructions: The system prompt.
        name: The judge's name.
        attempts: Calls made before an unusable answer becomes an
            [`AuditError`][steadyloop.audit.AuditError].
    """

    def __init__(
        self,
        model: ModelClient,
        *,
        instructions: str = MODEL_JUDGE_INSTRUCTIONS,
        name: str = "model",
        attempts: int = 2,
    ) -> None:
        self.model = model
        self.instructions = instructions
        self.name = name
        self.attempts = max(1, attempts)

    def messages(self, context: AuditContext) -> list[Message]:
        """The messages sent to the model for ``context``."""
        body: dict[str, JSONValue] = {
            "task": context.spec.prompt,
            "goal": None if context.spec.goal is None else context.spec.goal.goal,
            "round": context.round,
            "final_answer": context.run.output,
            "run_stop_reason": context.run.stop_reason.value,
            "verification": None
            if context.verification is None
            else {
                "passed": context.verification.passed,
                "summary": context.verification.summary,
                "evidence": context.verification.evidence,
            },
        }
        return [
            Message("system", self.instructions),
            Message("user", json.dumps(body, ensure_ascii=False, indent=2)),
        ]

    async def judge(self, context: AuditContext) -> Sequence[Finding]:
        """Ask the model; parse its findings.

        Raises:
            AuditError: The model failed, or kept answering something that is not the
                JSON asked for.
        """
        problem = ""
        for _ in range(self.attempts):
            try:
                reply = await self.model.complete(self.messages(context), [])
            except ModelError as exc:
                problem = f"the model call failed: {exc}"
                continue
            try:
                return self._parse(reply.text or "", context)
            except (ValueError, KeyError, TypeError) as exc:
                problem = (
                    f"the answer is not the findings JSON ({exc}): {(reply.text or '')[:200]!r}"
                )
        raise AuditError(f"judge {self.name!r} could not judge task {context.task_id!r}: {problem}")

    @staticmethod
    def _parse(text: str, context: AuditContext) -> list[Finding]:
        match = _JSON_BLOCK.search(text)
        if match is None:
            raise ValueError("no JSON object")
        data = json.loads(match.group(0))
        items = data["findings"]
        if not isinstance(items, list):
            raise TypeError("findings is not a list")
        out = []
        for item in items:
            if not isinstance(item, Mapping):
                raise TypeError(f"a finding is not an object: {item!r}")
            out.append(
                Finding(
                    id="",
                    severity=Severity(str(item.get("severity", "major")).lower()),
                    evidence=str(item["evidence"]),
                    reproduction=str(
                        item.get("reproduction") or f"steadyloop audit show {context.task_id}"
                    ),
                    acceptance=str(item.get("acceptance") or "the judge finds nothing to fix"),
                    kind=FindingKind.JUDGEMENT,
                    gate=Gate.JUDGEMENT,
                    title=str(item.get("title", "")),
                )
            )
        return out


@dataclass(frozen=True)
class AuditReport:
    """The audit of one round.

    Attributes:
        round: The round audited.
        audit_round: Which audit this is.
        findings: Every finding, numbered.
        judges: The judges consulted.
    """

    round: int
    audit_round: int
    findings: tuple[Finding, ...] = ()
    judges: tuple[str, ...] = field(default=())

    @property
    def passed(self) -> bool:
        """Whether nothing above ``info`` was found."""
        return not any(f.blocking for f in self.findings)

    def to_json(self) -> dict[str, JSONValue]:
        """Return the report as a JSON object (the ``audited`` record's payload)."""
        return {
            "round": self.round,
            "audit_round": self.audit_round,
            "passed": self.passed,
            "findings": [f.to_json() for f in self.findings],
            "judges": list(self.judges),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AuditReport:
        """Rebuild a report from [`to_json`][steadyloop.audit.AuditReport.to_json] output."""
        return cls(
            round=int(data["round"]),
            audit_round=int(data["audit_round"]),
            findings=tuple(Finding.from_json(f) for f in data.get("findings") or ()),
            judges=tuple(str(j) for j in data.get("judges") or ()),
        )


class Auditor:
    """Turns a round's gates into findings.

    Args:
        judges: Judges for the judgement gate, consulted in order. They are consulted
            only when the execution gate passed (there is no work to judge otherwise).
    """

    def __init__(self, judges: Sequence[Judge] = ()) -> None:
        self.judges = tuple(judges)

    async def audit(self, context: AuditContext) -> AuditReport:
        """Audit one round.

        Raises:
            AuditError: A judge could not judge.
        """
        drafts: list[Finding] = []
        run = context.run
        run_ref = (
            f'steadyloop journal show <journal> \'["run","{context.run_id}"]\' -n {context.app}'
        )
        if run.stop_reason is not StopReason.COMPLETED:
            drafts.append(
                Finding(
                    id="",
                    severity=Severity.BLOCKER,
                    evidence=f"the run stopped with {run.stop_reason.value}: {run.detail}",
                    reproduction=run_ref,
                    acceptance="the run ends with a final answer (stop reason completed)",
                    kind=FindingKind.DETERMINISTIC,
                    gate=Gate.EXECUTION,
                    title="the run did not complete",
                )
            )
        v = context.verification
        if v is not None and not v.passed:
            drafts.append(
                Finding(
                    id="",
                    severity=Severity.BLOCKER,
                    evidence=f"{v.summary}\n{v.evidence}",
                    reproduction=f"cd {v.cwd} && {v.command}" if v.cwd else v.command,
                    acceptance=f"`{v.command}` exits with status 0",
                    kind=FindingKind.DETERMINISTIC,
                    gate=Gate.VERIFICATION,
                    title="the verify command failed",
                )
            )
        names: list[str] = []
        if run.stop_reason is StopReason.COMPLETED:
            for judge in self.judges:
                names.append(judge.name)
                drafts.extend(
                    replace(f, id="", gate=Gate.JUDGEMENT) for f in await judge.judge(context)
                )
        counters: dict[Gate, int] = {}
        numbered = []
        for f in drafts:
            counters[f.gate] = counters.get(f.gate, 0) + 1
            numbered.append(replace(f, id=f"r{context.round}.{f.gate.value}.{counters[f.gate]}"))
        return AuditReport(context.round, context.audit_round, tuple(numbered), tuple(names))
