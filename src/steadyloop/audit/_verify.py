"""The verifier: runs a goal's verify command and turns the outcome into evidence."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from steadyloop.audit._executors import (
    CUT_NOTE,
    CommandResult,
    Executor,
    SubprocessExecutor,
    _char_start,
    _complete_prefix,
)
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
        """Turn a command result into a verification with capped evidence.

        The evidence keeps about ``limit`` bytes of text (notes aside), from the
        start and the end. Each place output is missing, whether the executor cut it
        or the evidence did, is one note saying how many bytes of output were cut
        there (and a last line gives the sum when there are several); ``cut`` is that
        sum: output only, never the executor's notes or the headers.
        """
        pieces: list[_Piece] = []
        hidden: list[int] = []
        for name, text, stream_cut in (
            ("stdout", result.stdout, result.stdout_cut),
            ("stderr", result.stderr, result.stderr_cut),
        ):
            if not text:
                continue
            if pieces:
                pieces.append(("\n", False))
            pieces.append((f"--- {name} ---\n", False))
            split = _split_at_note(text, stream_cut)
            if split is None:
                # An executor that marks its cut some other way: its text is kept as it
                # is, and its count is added to the total.
                hidden += [stream_cut] if stream_cut > 0 else []
                pieces.append((text.rstrip(), True))
            else:
                head, tail = split
                pieces += [(head, True), stream_cut, (tail.rstrip(), True)]
        if not pieces:
            pieces.append(("(no output)", False))
        pieces = _cap_pieces(pieces, max(0, limit))
        gaps = [p for p in pieces if isinstance(p, int)]
        cut = sum(gaps) + sum(hidden)
        evidence = "".join(
            f"\n[… {p} bytes cut …]\n" if isinstance(p, int) else p[0] for p in pieces
        )
        if len(gaps) + len(hidden) > 1:
            evidence += f"\n[… {cut} bytes of output cut in all …]"
        return cls(
            passed=result.ok,
            command=shlex.join(result.argv),
            status=result.status,
            exit_code=result.exit_code,
            summary=result.summary(),
            evidence=evidence,
            cut=cut,
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
        """Rebuild from `to_json` output (e.g. a ``verified`` trail record)."""
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


_Piece = tuple[str, bool] | int
"""Evidence in the making: text (and whether it is the command's output), or a count of
bytes of output cut at that place."""


def _split_at_note(text: str, cut: int) -> tuple[str, str] | None:
    """Split an executor's capped text at its cut note: (head, tail), or ``None``.

    The note is told from output that merely looks like one by its numbers: the bytes
    it says were cut, kept before and kept after must be exactly those around it.
    """
    if cut <= 0:
        return None
    for match in CUT_NOTE.finditer(text):
        gone, first, last, total = (int(g) for g in match.groups())
        head, tail = text[: match.start()], text[match.end() :]
        if (
            gone == cut
            and first == len(head.encode("utf-8"))
            and last == len(tail.encode("utf-8"))
            and total == first + last + cut
        ):
            return head, tail
    return None


def _cap_pieces(pieces: list[_Piece], limit: int) -> list[_Piece]:
    """Keep the first ``limit // 2`` and the last ``limit - limit // 2`` bytes of text.

    The middle becomes one count: the bytes of output cut there, plus every count that
    was there. Characters are never split, nor are headers: one that reaches into the
    kept start or end is kept whole.
    """
    encoded = [b"" if isinstance(p, int) else p[0].encode("utf-8") for p in pieces]
    total = sum(len(b) for b in encoded)
    if total <= limit:
        return [p for p in pieces if not isinstance(p, int) or p > 0]
    front, back = limit // 2, total - (limit - limit // 2)  # the middle is [front, back)
    kept_front: list[_Piece] = []
    kept_back: list[_Piece] = []
    middle = 0
    start = 0
    for piece, data in zip(pieces, encoded, strict=True):
        end = start + len(data)
        if isinstance(piece, int):
            if start < front:
                kept_front.append(piece)
            elif start > back:
                kept_back.append(piece)
            else:
                middle += piece
        elif end <= front:
            kept_front.append(piece)
        elif start >= back:
            kept_back.append(piece)
        elif not piece[1]:
            # A header is kept whole, or dropped whole when it lies wholly in the middle.
            if start < front:
                kept_front.append(piece)
            elif end > back:
                kept_back.append(piece)
        else:
            head = data[: max(0, front - start)]
            head = head[: _complete_prefix(head)]
            tail = data[len(data) - max(0, end - back) :]
            tail = tail[_char_start(tail) :]
            if head:
                kept_front.append((head.decode("utf-8"), True))
            if tail:
                kept_back.append((tail.decode("utf-8"), True))
            middle += len(data) - len(head) - len(tail)
        start = end
    return [*kept_front, middle, *kept_back]


class Verifier:
    """Runs verify commands with an executor.

    Args:
        executor: Runs the command; a
            [`SubprocessExecutor`][steadyloop.audit.SubprocessExecutor] by default.
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
