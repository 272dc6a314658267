"""The JSON Schemas shipped with the package, and the bundled case suite.

``schemas/case.schema.json`` describes one case record (header or operation); it is
generated from the loader's models (`generate_case_schema`) and a test keeps the
shipped file in step. ``schemas/report.schema.json`` describes a replay report.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any, cast

from steadyloop._errors import CaseError
from steadyloop.replay._cases import case_record_adapter

__all__ = [
    "bundled_cases",
    "case_schema",
    "generate_case_schema",
    "pack_cases",
    "pack_names",
    "report_schema",
]

_PACKAGE = "steadyloop.replay"


def _load(name: str) -> dict[str, Any]:
    text = resources.files(_PACKAGE).joinpath("schemas", name).read_text(encoding="utf-8")
    return cast(dict[str, Any], json.loads(text))


def case_schema() -> dict[str, Any]:
    """Return the JSON Schema of one case record, as shipped with the package."""
    return _load("case.schema.json")


def report_schema() -> dict[str, Any]:
    """Return the JSON Schema of a replay report, as shipped with the package."""
    return _load("report.schema.json")


def generate_case_schema() -> dict[str, Any]:
    """Build the case-record schema from the loader's models (what the file must hold)."""
    schema = case_record_adapter().json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://steadyloop.dev/schemas/replay/case.schema.json",
        "title": "Steadyloop replay case record",
        "description": (
            "One line of a replay case file: the header (op 'case') on the first line, "
            "then one operation per line."
        ),
        **schema,
    }


def bundled_cases() -> Path:
    """Return the directory of the bundled case suite (one ``*.jsonl`` per case)."""
    return Path(str(resources.files(_PACKAGE).joinpath("cases")))


def pack_names() -> list[str]:
    """Return the names of the case packs shipped with Steadyloop (`hostile`, …)."""
    root = Path(str(resources.files(_PACKAGE).joinpath("packs")))
    return sorted(
        p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))
    )


def pack_cases(name: str) -> Path:
    """Return the directory of a shipped case pack.

    Raises:
        CaseError: There is no pack of that name (the message lists the packs).
    """
    names = pack_names()
    if name not in names:
        raise CaseError(
            f"--pack {name}",
            0,
            "",
            f"there is no case pack {name!r}; the packs are: {', '.join(names)}",
        )
    return Path(str(resources.files(_PACKAGE).joinpath("packs", name)))
