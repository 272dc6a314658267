"""When and under what load a benchmark ran: the ``measured`` entry of every result file.

Every ``bench_*.py`` calls [start][] before it measures and puts ``measured.entry()``
under the key ``measured`` of the JSON it writes. The documentation's performance page
shows that entry next to each figure drawn from the file (``hooks/benchmarks.py``
refuses a result without it), so a reader sees how old a figure is and how busy the
machine was: on a shared 2-core machine a load average of 4 can double a figure.

The entry holds:

* ``date``: when the measurement started, UTC, ISO 8601 to the second;
* ``load_average_at_start`` and ``load_average_at_end``: ``os.getloadavg()`` (1, 5 and
  15 minutes) before the first and after the last measurement;
* ``cpus``, ``platform`` and ``python``: the machine it ran on.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
from dataclasses import dataclass, field
from typing import Any


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded to hundredths."""
    return [round(x, 2) for x in os.getloadavg()]


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Measured:
    """A measurement under way: its start time and the load average when it started."""

    date: str = field(default_factory=_now)
    load_average_at_start: list[float] = field(default_factory=load_average)

    def entry(self) -> dict[str, Any]:
        """The ``measured`` entry for the result file, with the load average now."""
        return {
            "date": self.date,
            "load_average_at_start": self.load_average_at_start,
            "load_average_at_end": load_average(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        }


def start() -> Measured:
    """Note the date and the load average before a benchmark measures anything."""
    return Measured()
