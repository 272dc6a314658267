"""The verifier: runs a goal's verify command and turns the outcome into evidence."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from steadyloop.audit._executors import CommandResult, Executor, SubprocessExecutor, cap_text
from steadyloop.audit._tasks import VerifySpec
from steadyloop.records import JSONValue

__all__ = ["DEFAULT_EVIDENCE_LIMIT", "Verification", "Verifier"]

DEFAULT_EVIDENCE_LIMIT = 4000
"""Bytes of command output kept as evidence in the trail and in packets."""


@dataclass(frozen=True, slots=True)
class Verification:
    """A verify command's outcome, as the trail stores it.

    Attributes:
        passed: Whether the command exited with status 0.
        command: The command, as a shell line.
        status: ``exited``, ``timeout``, ``missing`` or ``error``.
        exit_code: Its exit code, if it exited.
        summary: One line on what happened.
        evidence: Its output, capped; when cut, the text says how many bytes were cut.
        cut: Bytes cut from the output (by the executor and for the evidence).
        duration: Seconds it ran.
        cwd: Where it ran.
    """

    passed: bool
    command: str
    status: str
    exit_code: int | None
    summary: str
    evidence: str
    cut: int
    duration: float
    cwd: str

    @classmethod
    def from_result(
        cls, result: CommandResult, limit: int = DEFAULT_EVIDENCE_LIMIT
    ) -> Verification:
        """Turn a command result into a verification with capped evidence."""
        parts = []
        if result.stdout:
            parts.append(f"--- stdout ---\n{result.stdout.rstrip()}")
        if result.stderr:
            parts.append(f"--- stderr ---\n{result.stderr.rstrip()}")
        text = "\n".join(parts) or "(no output)"
        evidence, cut = cap_text(text, limit)
        return cls(
            passed=result.ok,
            command=shlex.join(result.argv),
            status=result.status,
            exit_code=result.exit_code,
            summary=result.summary(),
            evidence=evidence,
            cut=cut + result.cut,
            duration=result.duration,
            cwd=result.cwd,
        )

    def to_json(self) -> dict[str, JSONValue]:
        """Return the verification as a JSON object."""
        return {
            "passed": self.passed,
            "command": self.command,
            "status": self.status,
            "exit_code": self.exit_code,
            "summary": self.summary,
            "evidence": self.evidence,
            "cut": self.cut,
            "duration": round(self.duration, 6),
            "cwd": self.cwd,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Verification:
        """Rebuild from :meth:`to_json` output (e.g. a ``verified`` trail record)."""
        code = data.get("exit_code")
        return cls(
            passed=bool(data.get("passed")),
            command=str(data.get("command", "")),
            status=str(data.get("status", "")),
            exit_code=None if code is None else int(code),
            summary=str(data.get("summary", "")),
            evidence=str(data.get("evidence", "")),
            cut=int(data.get("cut", 0)),
            duration=float(data.get("duration", 0.0)),
            cwd=str(data.get("cwd", "")),
        )


class Verifier:
    """Runs verify commands with an executor.

    Args:
        executor: Runs the command; a :class:`SubprocessExecutor` by default.
        evidence_limit: Bytes of output kept as evidence.
    """

    def __init__(
        self, executor: Executor | None = None, *, evidence_limit: int = DEFAULT_EVIDENCE_LIMIT
    ) -> None:
        self.executor: Executor = executor or SubprocessExecutor()
        self.evidence_limit = evidence_limit

    async def verify(self, spec: VerifySpec, cwd: str | os.PathLike[str]) -> Verification:
        """Run ``spec``'s command in ``cwd``; its failure is a result, never an exception."""
        result = await self.executor.run(
            spec.command, cwd=cwd, timeout=spec.timeout, env=spec.env, allow_env=spec.allow_env
        )
        return Verification.from_result(result, self.evidence_limit)
