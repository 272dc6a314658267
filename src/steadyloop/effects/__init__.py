"""The effect ledger: what every effect's intent and result mean, in one layer.

Below the agent loop and the integrations, and used by both: the loop driver writes
its effects' records into a run's stream with this vocabulary, and each guard for
another runtime keeps its effects in an [EffectLedger][steadyloop.effects.EffectLedger],
one stream per effect key. It owns the policy of an effect
([ReplayPolicy][steadyloop.effects.ReplayPolicy]), its states (open; happened, with a value
or an error; raised; not happened; decided by whom), begin / finish / decide, and the
owner of an open intent ([Owner][steadyloop.effects.Owner]), told alive or dead from the
process table, with no renewal writes.

Examples:
    >>> import asyncio
    >>> from steadyloop.effects import EffectLedger, ReplayPolicy
    >>> from steadyloop.journal import open_journal
    >>> async def demo():
    ...     async with await open_journal("memory://") as journal:
    ...         ledger = EffectLedger(journal)
    ...         begun = await ledger.begin(["order-7", "charge"], "charge",
    ...                                    ReplayPolicy.NEVER, {"cents": 500})
    ...         await ledger.finish(begun, ("ch_1", 500))
    ...         again = await ledger.begin(["order-7", "charge"], "charge",
    ...                                    ReplayPolicy.NEVER, {"cents": 500})
    ...         return again.value
    >>> asyncio.run(demo())
    ('ch_1', 500)
"""

from steadyloop.effects._ledger import (
    Begun,
    EffectLedger,
    Recorded,
    Unknown,
    acting,
    current_intent,
    describe,
)
from steadyloop.effects._outcomes import (
    DONE_STATUSES,
    REDO_STATUSES,
    Happened,
    NotHappened,
    ReplayPolicy,
    decision_from,
    decision_payload,
    interrupted,
)
from steadyloop.effects._owner import LIVE_TOKENS, Liveness, Owner

__all__ = [
    "DONE_STATUSES",
    "LIVE_TOKENS",
    "REDO_STATUSES",
    "Begun",
    "EffectLedger",
    "Happened",
    "Liveness",
    "NotHappened",
    "Owner",
    "Recorded",
    "ReplayPolicy",
    "Unknown",
    "acting",
    "current_intent",
    "decision_from",
    "decision_payload",
    "describe",
    "interrupted",
]
