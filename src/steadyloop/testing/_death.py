"""Process death for crash kits of other runtimes, and the report they share.

A crash kit for a runtime that writes from background tasks (LangGraph with
``durability="async"``, an SDK that saves its session as it goes) cannot crash by
raising an exception where the write happens: the runtime may catch it, or go on in
another task. It needs what a kill does (the crash model of
[abandon][steadyloop.testing.abandon]): from the moment of death, *nothing* of that
process reaches any store or the outside world. A [ProcessDeath][steadyloop.testing.ProcessDeath]
is shared by everything the simulated process touches: its framework store, its
Steadyloop journal and its effect sink. Each write boundary passes through it; at the
planned one it dies, and from then on every write, read and effect of that process
raises [SimulatedCrash][steadyloop.testing.SimulatedCrash], whichever thread or task
makes it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from steadyloop.effects import current_intent
from steadyloop.faults import Fault, FaultPlan, FaultyJournal, How, SimulatedCrash
from steadyloop.integrations import Guard
from steadyloop.journal import Journal
from steadyloop.testing._effects import EffectSink, Repeat

__all__ = [
    "CrashPoint",
    "FrameworkCrashReport",
    "KitProcess",
    "Life",
    "ProcessDeath",
    "ProcessJournal",
    "crash_every_boundary",
]

P = TypeVar("P")
G = TypeVar("G", bound=Guard)
Side = Literal["before", "after"]


class ProcessDeath(FaultPlan):
    """The life of one simulated process: its write boundaries, and its death.

    A [`FaultPlan`][steadyloop.faults.FaultPlan] of the fault layer, configured with at
    most one crash (counted over every boundary the process passes).

    Args:
        crash_at: The 1-based write boundary to die at; None never dies.
        side: ``"before"`` the write reaches its store, or ``"after"`` it is durable.
        how: How it dies: ``"crash"`` (a simulated death, for a process the kit
            simulates in its own) or ``"sigkill"`` (a real process kills itself).

    Attributes:
        boundaries: The labels of the write boundaries passed so far, in order.
        dead: Whether the process has died.
    """

    def __init__(
        self, crash_at: int | None = None, side: Side = "before", how: How = "crash"
    ) -> None:
        super().__init__(*(() if crash_at is None else (Fault(at=crash_at, side=side, how=how),)))
        self.crash_at = crash_at
        self.side = side

    def effect(self, sink: EffectSink, tool: str, policy: str, action: str, **details: Any) -> None:
        """Record an effect in ``sink``, unless the process has died (then it never happens)."""
        self.guarded(lambda: sink.record(tool, policy, action, **details))


class KitProcess(Generic[G]):
    """What an agent built for a crash kit may touch: its effects, and its guard.

    Attributes:
        death: The simulated process.
        guard: The guard of this process, or None in an unguarded run.
        sink: Where effects are counted.
    """

    def __init__(self, death: ProcessDeath, sink: EffectSink, guard: G | None) -> None:
        self.death = death
        self.sink = sink
        self.guard = guard

    def effect(self, tool: str, policy: str, action: str) -> str:
        """Make one counted effect happen (unless the process has died) and return its value.

        The effect is recorded with the intent of the guarded effect making it, if any,
        so a crash kit can answer an unknown effect with the truth.

        Returns:
            ``"done:" + action``: a deterministic value the tool can return.
        """
        value = f"done:{action}"
        self.death.effect(self.sink, tool, policy, action, value=value, intent_id=current_intent())
        return value

    def end(self, dead: bool) -> None:
        """End the process's guard: closed if it lived, only its thread stopped if it died."""
        if self.guard is None:
            return
        if dead:  # the kernel ends its threads; nothing is closed
            self.guard.abandon()
        else:
            self.guard.close()


class ProcessJournal(FaultyJournal):
    """A Steadyloop journal of a simulated process: each append a write boundary.

    A [`FaultyJournal`][steadyloop.faults.FaultyJournal] on the process's plan.

    Args:
        inner: The journal that stores the records.
        death: The process it belongs to.
        label: How its write boundaries are named in reports.
    """

    def __init__(self, inner: Journal, death: ProcessDeath, label: str = "journal.append") -> None:
        super().__init__(inner, death, label)
        self.death = death


@dataclass(frozen=True, slots=True)
class CrashPoint:
    """What one crash did.

    Attributes:
        boundary: The 1-based write boundary the process died at.
        side: ``"before"`` or ``"after"`` that write.
        label: What the write was (for example ``"put"``, ``"put_writes"``,
            ``"guard.append"``).
        repeated: Actions whose effect happened more than once, with their policy.
        lost: Actions of the uninterrupted run whose effect never happened.
        final_equal: Whether the final state equals the uninterrupted run's.
        interrupts: Unknown effects surfaced through the runtime and decided.
        restarts: Processes started after the crash until the run finished.
        error: Why the run did not finish, if it did not; or that the crashing run
            ended before it reached its write, so nothing was tested at this point.
        recovery_boundary: For a crash during recovery: the 1-based write boundary
            of the first process after the crash that died too (None otherwise).
        recovery_side: ``"before"`` or ``"after"`` that write.
        recovery_label: What that write was.
        recovery_reached: For a crash during recovery: whether the restart reached
            that write (a runtime writing in the background may coalesce writes, so
            a restart can finish the run before it; the point is then one crash).
    """

    boundary: int
    side: Side
    label: str
    repeated: tuple[Repeat, ...]
    lost: tuple[str, ...]
    final_equal: bool
    interrupts: int = 0
    restarts: int = 0
    error: str | None = None
    recovery_boundary: int | None = None
    recovery_side: Side | None = None
    recovery_label: str | None = None
    recovery_reached: bool | None = None

    @property
    def repeated_never(self) -> tuple[Repeat, ...]:
        """The repeats of `NEVER` effects: the bug a guard exists to prevent."""
        return tuple(r for r in self.repeated if r.policy == "never")

    def to_json(self) -> dict[str, Any]:
        """Return the point as JSON."""
        return {
            "boundary": self.boundary,
            "side": self.side,
            "label": self.label,
            "repeated": [
                {"tool": r.tool, "policy": r.policy, "action": r.action, "count": r.count}
                for r in self.repeated
            ],
            "lost": list(self.lost),
            "final_equal": self.final_equal,
            "interrupts": self.interrupts,
            "restarts": self.restarts,
            "error": self.error,
            **(
                {}
                if self.recovery_boundary is None
                else {
                    "recovery_boundary": self.recovery_boundary,
                    "recovery_side": self.recovery_side,
                    "recovery_label": self.recovery_label,
                    "recovery_reached": self.recovery_reached,
                }
            ),
        }


@dataclass(frozen=True)
class FrameworkCrashReport:
    """A crash kit's findings for one runtime, configuration and guard setting.

    Attributes:
        framework: The runtime (``"langgraph"``, ``"openai-agents"``).
        mode: Its durability setting (``"sync"``, ``"async"``, …).
        guarded: Whether the effects ran under a Steadyloop guard.
        boundaries: The write boundaries of the uninterrupted run, in order.
        effects: How often each action's effect happened in the uninterrupted run.
        points: One entry per crash.
    """

    framework: str
    mode: str
    guarded: bool
    boundaries: tuple[str, ...]
    effects: dict[str, int]
    points: tuple[CrashPoint, ...] = field(default=())

    def repeated_points(self, policy: str | None = None) -> list[CrashPoint]:
        """The crash points at which some effect (of ``policy``, if given) happened twice."""
        return [
            p for p in self.points if any(policy is None or r.policy == policy for r in p.repeated)
        ]

    def summary(self) -> dict[str, Any]:
        """Counts over the points: crashes, repeats, losses, wrong final states."""
        return {
            "framework": self.framework,
            "mode": self.mode,
            "guarded": self.guarded,
            "crash_points": len(self.points),
            "points_with_repeats": len(self.repeated_points()),
            "points_with_never_repeats": len(self.repeated_points("never")),
            "repeated_effects": sum(r.count - 1 for p in self.points for r in p.repeated),
            "points_with_losses": sum(1 for p in self.points if p.lost),
            "wrong_final_state": sum(1 for p in self.points if not p.final_equal),
            "interrupts": sum(p.interrupts for p in self.points),
            "unfinished": sum(1 for p in self.points if p.error),
            "recovery_points": sum(1 for p in self.points if p.recovery_boundary is not None),
            "recovery_unreached": sum(1 for p in self.points if p.recovery_reached is False),
        }

    def to_json(self) -> dict[str, Any]:
        """Return the whole report as JSON."""
        return {
            **self.summary(),
            "boundaries": list(self.boundaries),
            "effects": self.effects,
            "points": [p.to_json() for p in self.points],
        }

    def assert_guarded(self) -> None:
        """Fail unless no `NEVER` effect repeated, none was lost, and every run finished right."""
        bad = [p for p in self.points if p.repeated_never or p.lost or not p.final_equal or p.error]
        if bad:
            raise AssertionError(
                f"{len(bad)} of {len(self.points)} crash points went wrong:\n"
                + "\n".join(json.dumps(p.to_json(), sort_keys=True) for p in bad)
            )


@dataclass(frozen=True)
class Life(Generic[P]):
    """How a crash kit starts, drives and ends a simulated process of one runtime.

    Attributes:
        start: A new process on the store in a folder, dying as the death says.
        finish: Drive the run to its end in a process (``True``: give the input, a
            new run; ``False``: continue after a crash); return the unknown effects
            it decided.
        state: The final state of the run, as comparable JSON.
        sink: Where the process counts its effects.
        end: End a process: close what a live one holds, or free only what the
            kernel frees of a dead one (``True`` if it died).
    """

    start: Callable[[Path, ProcessDeath], P]
    finish: Callable[[P, bool], int]
    state: Callable[[P], Any]
    sink: Callable[[P], EffectSink]
    end: Callable[[P, bool], None]


def crash_every_boundary(
    life: Life[P],
    *,
    framework: str,
    mode: str,
    guarded: bool,
    workdir: Path,
    sides: Sequence[Side] = ("before", "after"),
    max_restarts: int = 5,
    recovery_crashes: bool = False,
) -> FrameworkCrashReport:
    """Run once uninterrupted, then die before and after every write boundary and resume.

    Each crash point runs in a folder of its own under ``workdir`` (a fresh store);
    after the crash, new processes continue the run until it ends. See
    [FrameworkCrashReport][steadyloop.testing.FrameworkCrashReport] for what is compared.

    Args:
        life: How the runtime's processes start, run and end.
        framework: The runtime's name, for the report.
        mode: Its durability setting, for the report.
        guarded: Whether its effects run under a Steadyloop guard, for the report.
        workdir: An empty folder; each crash point gets a folder of its own in it.
        sides: Which sides of each boundary to crash at.
        max_restarts: How many processes may fail to finish the run after a crash
            before the point is reported unfinished.
        recovery_crashes: Also crash the first process after each crash, at every
            write boundary it passes (crashes during recovery: the resumed run's
            own writes, such as a decision recorded or a session saved after one).
    """
    ref = workdir / "reference"
    ref.mkdir(parents=True)
    death = ProcessDeath()
    process = life.start(ref, death)
    life.finish(process, True)
    reference = _Reference(life.state(process), _counts(life, process))
    boundaries = tuple(death.boundaries)
    life.end(process, False)

    points: list[CrashPoint] = []
    for k, label in enumerate(boundaries, start=1):
        for side in sides:
            point, recovery = _crash_and_resume(
                life, workdir / f"{k:03d}-{side}", [(k, side)], reference, max_restarts
            )
            points.append(replace(point, label=label))
            if not recovery_crashes:
                continue
            for j, second in enumerate(recovery, start=1):
                for side2 in sides:
                    point, _ = _crash_and_resume(
                        life,
                        workdir / f"{k:03d}-{side}-{j:03d}-{side2}",
                        [(k, side), (j, side2)],
                        reference,
                        max_restarts,
                    )
                    points.append(
                        replace(
                            point,
                            label=label,
                            recovery_boundary=j,
                            recovery_side=side2,
                            recovery_label=second,
                        )
                    )
    return FrameworkCrashReport(
        framework=framework,
        mode=mode,
        guarded=guarded,
        boundaries=boundaries,
        effects=dict(reference.effects),
        points=tuple(points),
    )


@dataclass(frozen=True, slots=True)
class _Reference:
    """What the uninterrupted run ended with: its state and its effects."""

    state: Any
    effects: Counter[str]


def _counts(life: Life[P], process: P) -> Counter[str]:
    return Counter(str(e["action"]) for e in life.sink(process).effects())


def _crash_and_resume(
    life: Life[P],
    folder: Path,
    crashes: Sequence[tuple[int, Side]],
    reference: _Reference,
    max_restarts: int,
) -> tuple[CrashPoint, tuple[str, ...]]:
    """Die at each of ``crashes`` in turn (one process each), then resume until the run ends.

    Returns:
        The point (labelled by the caller), and the write boundaries the first
        process after the last crash passed (where a further crash could land).
    """
    folder.mkdir()
    error: str | None = None
    reached = True
    for n, (k, side) in enumerate(crashes):
        death = ProcessDeath(k, side)
        process = life.start(folder, death)
        ended = ""
        try:
            life.finish(process, n == 0)
        except SimulatedCrash:
            pass
        except Exception as exc:  # a dying run may fail any way: reported below
            ended = f" ({type(exc).__name__}: {exc})"
        life.end(process, death.dead)
        # A run that ended without reaching write k tested nothing at this point:
        # say so, rather than report it clean. A restart may pass fewer writes than
        # the one observed (a runtime writing in the background coalesces some): it
        # finished the run, which is then checked as after a single crash.
        if not death.dead:
            if n == 0 or ended:
                error = f"the {'run' if n == 0 else 'restart'} ended before write {k}{ended}"
            reached = False
            break
    interrupts = restarts = 0
    recovery: tuple[str, ...] = ()
    final: Any = None
    while final is None and error is None:
        restarts += 1
        death = ProcessDeath()
        process = life.start(folder, death)
        try:
            interrupts += life.finish(process, False)
            final = life.state(process)
        except Exception as exc:  # the run did not finish: say why
            if restarts >= max_restarts:
                error = f"{type(exc).__name__}: {exc}"
        finally:
            life.end(process, death.dead)
            if restarts == 1:
                recovery = tuple(death.boundaries)
    counts = _counts(life, process)
    k, side = crashes[0]
    point = CrashPoint(
        boundary=k,
        side=side,
        label="",
        repeated=tuple(life.sink(process).repeats()),
        lost=tuple(sorted(a for a in reference.effects if counts[a] == 0)),
        final_equal=final == reference.state,
        interrupts=interrupts,
        restarts=restarts,
        error=error,
        recovery_reached=None if len(crashes) == 1 else reached,
    )
    return point, recovery
