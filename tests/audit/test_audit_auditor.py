"""The auditor's gates and judges, and packets: content, idempotent application, first turn only."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from audit_helpers import goal_spec

from steadyloop.audit import (
    PREAMBLE_CLOSE,
    PREAMBLE_OPEN,
    AuditContext,
    AuditError,
    Auditor,
    AuditReport,
    Finding,
    FindingKind,
    Gate,
    ModelJudge,
    Packet,
    PreambleModel,
    Rule,
    RulesJudge,
    Severity,
    TaskSpec,
    Verification,
    apply_preamble,
    apply_to_messages,
    compose_preamble,
    count_preambles,
    decide,
)
from steadyloop.loop import Message, ModelReply, RunResult, ScriptedModel, StopReason, ToolSpec


def ctx(
    output: str = "done", stop: StopReason = StopReason.COMPLETED, verified: bool | None = None
) -> AuditContext:
    v = None
    if verified is not None:
        v = Verification(
            verified,
            "pytest -q",
            "exited",
            0 if verified else 1,
            "summary",
            "1 failed",
            0,
            0.1,
            "/w",
        )
    return AuditContext(
        task_id="t1",
        spec=goal_spec("t1"),
        round=2,
        audit_round=2,
        run=RunResult("t1.r2", stop, output=output, detail="why"),
        verification=v,
        run_id="t1.r2",
    )


async def test_gates_become_numbered_findings_with_every_field() -> None:
    """A run that did not complete and a failed verify give execution and verification findings with all fields."""
    report = await Auditor().audit(ctx(stop=StopReason.BUDGET_EXHAUSTED, verified=False))
    assert not report.passed
    ex, ver = report.findings
    assert (ex.id, ex.gate, ex.kind, ex.severity) == (
        "r2.execution.1",
        Gate.EXECUTION,
        FindingKind.DETERMINISTIC,
        Severity.BLOCKER,
    )
    assert "budget_exhausted" in ex.evidence and '["run","t1.r2"]' in ex.reproduction
    assert (ver.id, ver.gate) == ("r2.verification.1", Gate.VERIFICATION)
    assert (
        ver.reproduction == "cd /w && pytest -q"
        and ver.acceptance == "`pytest -q` exits with status 0"
    )
    assert AuditReport.from_json(report.to_json()) == report


async def test_rules_and_model_judges_feed_the_judgement_gate() -> None:
    """A broken rule is a deterministic judgement-gate finding; a model judge's findings are of kind judgement."""
    answer = json.dumps(
        {
            "findings": [
                {
                    "title": "vague",
                    "severity": "minor",
                    "evidence": "says 'done' only",
                    "acceptance": "explain",
                }
            ]
        }
    )
    model = ScriptedModel([answer])
    judges = [
        RulesJudge([Rule.output_contains("42"), Rule.output_lacks("TODO")]),
        ModelJudge(model),
    ]
    report = await Auditor(judges).audit(ctx(output="done TODO"))
    kinds = [(f.id, f.kind.value, f.severity.value) for f in report.findings]
    assert kinds == [
        ("r2.judgement.1", "deterministic", "major"),
        ("r2.judgement.2", "deterministic", "major"),
        ("r2.judgement.3", "judgement", "minor"),
    ]
    assert report.judges == ("rules", "model")
    sent = model.calls[0][1]
    assert (
        sent[0].role == "system"
        and json.loads(sent[1].content or "")["final_answer"] == "done TODO"
    )


async def test_info_findings_do_not_push_back() -> None:
    """A round whose only findings are info passes."""
    answer = json.dumps({"findings": [{"severity": "info", "evidence": "fine", "acceptance": "-"}]})
    report = await Auditor([ModelJudge(ScriptedModel([answer]))]).audit(ctx())
    assert report.passed and len(report.findings) == 1


async def test_a_model_judge_that_answers_nonsense_raises_audit_error() -> None:
    """A model judge whose answers never parse raises AuditError after its attempts."""
    judge = ModelJudge(ScriptedModel(lambda i, m: "I think it is fine"), attempts=2)
    with pytest.raises(AuditError, match="not the findings JSON"):
        await Auditor([judge]).audit(ctx())


async def test_judges_are_skipped_when_the_run_did_not_complete() -> None:
    """With nothing to judge (the run failed), judges are not consulted."""
    model = ScriptedModel([])
    report = await Auditor([ModelJudge(model)]).audit(ctx(stop=StopReason.ERROR))
    assert [f.gate for f in report.findings] == [Gate.EXECUTION] and model.calls == []


def test_decide_orders_completion_budget_and_cap() -> None:
    """Decide completes a passing round, spends the goal budget, caps audits, else pushes back."""
    spec = goal_spec("t", budget=3)
    bad = AuditReport(
        1, 1, (Finding("f", Severity.MAJOR, "e", "r", "a", FindingKind.JUDGEMENT, Gate.JUDGEMENT),)
    )
    failed = Verification(False, "c", "exited", 1, "s", "e", 0, 0, "")
    passed = Verification(True, "c", "exited", 0, "s", "e", 0, 0, "")
    assert decide(spec, 1, AuditReport(1, 1), passed)[0].short == "completed"
    assert decide(spec, 1, bad, failed)[0].short == "pushed_back"
    assert decide(spec, 3, AuditReport(3, 3, bad.findings), failed)[0].short == "goal_unmet"
    assert decide(spec, 3, AuditReport(3, 3, bad.findings), passed)[0].short == "needs_human"
    plain = TaskSpec(prompt="p", max_audit_rounds=2)
    assert decide(plain, 2, AuditReport(2, 2, bad.findings), None)[0].short == "needs_human"


def packet() -> Packet:
    f = Finding(
        "r1.verification.1",
        Severity.BLOCKER,
        "exit 1\nassert 41 == 42",
        "cd /w && pytest",
        "`pytest` exits 0",
        FindingKind.DETERMINISTIC,
        Gate.VERIFICATION,
        "the verify command failed",
    )
    return Packet("t1", 1, 1, (f,))


def test_packet_text_carries_evidence_reproduction_and_acceptance() -> None:
    """The packet's text lists each finding with evidence, reproduction and acceptance, and round-trips as JSON."""
    p = packet()
    text = p.text()
    for part in (
        "r1.verification.1",
        "blocker",
        "assert 41 == 42",
        "cd /w && pytest",
        "`pytest` exits 0",
    ):
        assert part in text
    assert Packet.from_json(p.to_json()) == p and p.id == "t1/p1"


def test_applying_a_preamble_twice_does_not_repeat_it() -> None:
    """apply_preamble is idempotent and leaves the prompt text intact, even one that begins with preamble markers of its own."""
    prompt = "Fix the bug.\n\nGoal: tests pass"
    pre = compose_preamble(packet())
    assert pre is not None
    once = apply_preamble(prompt, pre)
    assert apply_preamble(once, pre) == once
    assert count_preambles(once) == 1 and once.endswith(prompt)
    newer = compose_preamble(packet(), resume_round=2, lost_worker="w9")
    assert newer is not None
    own = f"{PREAMBLE_OPEN}\nthe user's own block\n{PREAMBLE_CLOSE}\n\n{prompt}"
    shown = apply_preamble(own, newer)
    assert shown == f"{newer}\n\n{own}" and "Resume note: round 2" in shown
    assert apply_preamble(prompt, None) == prompt
    assert compose_preamble(None) is None


def test_messages_get_the_preamble_in_a_copy_only() -> None:
    """apply_to_messages changes a copy: the first user message gains the preamble, the original list is untouched."""
    msgs = [Message("system", "sys"), Message("user", "prompt"), Message("user", "later")]
    out = apply_to_messages(msgs, "PRE")
    assert [m.content for m in out] == ["sys", "PRE\n\nprompt", "later"]
    assert msgs[1].content == "prompt"
    assert apply_to_messages(apply_to_messages(msgs, "PRE"), "PRE") == out


async def test_preamble_model_shows_the_preamble_on_its_first_call_only() -> None:
    """PreambleModel adds the preamble to the first call's messages only and keeps the inner model's name."""
    seen: list[str] = []

    def script(i: int, messages: Sequence[Message]) -> ModelReply | str:
        seen.append(next(m.content or "" for m in messages if m.role == "user"))
        return "ok"

    inner = ScriptedModel(script, name="inner")
    model = PreambleModel(inner, compose_preamble(packet()))
    tools: list[ToolSpec] = []
    msgs = [Message("user", "prompt")]
    await model.complete(msgs, tools)
    await model.complete(msgs, tools)
    assert [count_preambles(s) for s in seen] == [1, 0]
    assert seen[0].startswith(PREAMBLE_OPEN) and model.name == "inner" and model.calls == 2
