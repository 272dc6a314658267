"""``steadyloop replay run`` as a CI step: it compares something or says it could not (issue 19)."""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path
from typing import Any

import pytest
from dict_store import ALL, DictStore
from replay_helpers import replay_cli

from steadyloop._errors import UnknownBackend
from steadyloop.replay import (
    Capability,
    bundled_cases,
    load_cases,
    parse_store_url,
    replay,
    resolve_stores,
)

SINGLE = str(bundled_cases() / "single_turn.jsonl")
STATE = str(bundled_cases() / "state_scopes.jsonl")


def test_a_framework_store_named_alone_is_compared_with_its_in_memory_store(
    tmp_path: Path,
) -> None:
    """`-b adk+sqlite` alone gets `adk+memory` as its reference, and a comparison runs."""
    pytest.importorskip("google.adk")
    report_file = tmp_path / "report.json"
    out = replay_cli("run", SINGLE, "-b", "adk+sqlite", "--report", str(report_file))
    assert out.returncode in (0, 1), out.stdout + out.stderr
    report = json.loads(report_file.read_text(encoding="utf-8"))
    assert report["backends"] == ["adk+memory", "adk+sqlite"]
    assert report["references"] == {"adk": "adk+memory"}
    assert report["counts"]["comparisons"] == 1


async def test_a_case_skipped_on_every_pair_counts_as_not_compared(tmp_path: Path) -> None:
    """A case that ran on the reference alone (its other store lacking a capability) is not_applicable."""
    cases = load_cases([Path(STATE)])
    lacking = DictStore("dict+thin", ALL - {Capability.APP_STATE}, backend="thin")
    report = await replay(cases, [DictStore(), lacking], workdir=tmp_path)
    (case,) = report.cases
    assert case.runs["dict+memory"].applicable and not case.runs["dict+thin"].applicable
    assert case.status == "not_applicable"
    assert not report.compared


def test_a_run_that_compared_nothing_exits_2_and_says_so() -> None:
    """A framework's in-memory store alone compares nothing: exit 2 with one line saying so."""
    pytest.importorskip("google.adk")
    out = replay_cli("run", SINGLE, "-b", "adk+memory")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "nothing was compared" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_store_url_with_nothing_after_its_colon_is_refused(tmp_path: Path) -> None:
    """`adk+sqlite:` raises as parse_store_url's docstring says, and the CLI exits 2 with one line."""
    with pytest.raises(UnknownBackend, match="nothing follows the colon"):
        parse_store_url("adk+sqlite:", tmp_path)
    out = replay_cli("run", SINGLE, "-b", "adk+sqlite:")
    assert out.returncode == 2, out.stdout + out.stderr
    assert [line for line in out.stderr.splitlines() if line.strip()] == [
        "error: store 'adk+sqlite:': nothing follows the colon; give a location "
        "(adk+sqlite://…) or none (adk+sqlite)"
    ]


def test_a_label_is_the_text_before_the_first_equals_sign_without_a_colon() -> None:
    """`LABEL=URL` splits at the first `=`; a URL whose query holds `=` is no label."""
    from steadyloop._urls import split_label as _split_label

    assert _split_label("prod=adk+postgresql://h/db?x=1") == ("prod", "adk+postgresql://h/db?x=1")
    assert _split_label("postgresql://h/db?options=-c") == (None, "postgresql://h/db?options=-c")
    assert _split_label("sqlite") == (None, "sqlite")
    for bad in ("=sqlite", "a b=sqlite", "prod="):
        with pytest.raises(UnknownBackend, match="LABEL=URL"):
            _split_label(bad)


def test_two_stores_of_one_backend_are_compared_under_their_labels(tmp_path: Path) -> None:
    """`-b a=adk+sqlite,b=adk+sqlite` runs both, named by their labels, each compared."""
    pytest.importorskip("google.adk")
    report_file = tmp_path / "report.json"
    out = replay_cli(
        "run", SINGLE, "-b", "a=adk+sqlite", "-b", "b=adk+sqlite", "--report", str(report_file)
    )
    assert out.returncode in (0, 1), out.stdout + out.stderr
    report = json.loads(report_file.read_text(encoding="utf-8"))
    assert report["backends"] == ["adk+memory", "a", "b"]
    assert report["frameworks"] == {"adk+memory": "adk", "a": "adk", "b": "adk"}
    assert report["counts"]["comparisons"] == 2


def test_labels_name_steadyloop_backends_too(tmp_path: Path) -> None:
    """Two labelled `sqlite` stores are two stores; unlabelled, the clash says how to label."""
    stores = resolve_stores(["x=sqlite", "y=sqlite"], tmp_path)
    assert [s.name for s in stores] == ["x", "y"]
    with pytest.raises(UnknownBackend, match="LABEL=URL"):
        resolve_stores(["adk+memory", "adk+memory"], tmp_path)


def test_store_columns_are_told_apart_at_80_columns() -> None:
    """At 80 columns each store's column header shows the part that tells it from the others."""
    pytest.importorskip("agents")
    out = replay_cli(
        "run",
        SINGLE,
        "-b",
        "openai-agents+sqlite,openai-agents+sqlalchemy+sqlite",
        env={"COLUMNS": "80"},
    )
    assert out.returncode in (0, 1), out.stdout + out.stderr
    header = [line for line in out.stdout.split("┡", 1)[0].splitlines() if "┃" in line]
    assert max(len(line) for line in header) <= 80
    cells = [line.split("┃")[1:-1] for line in header]
    # Each column's header, read top to bottom, is its whole name: nothing is cut off.
    columns = ["".join(row[i].replace(" ", "") for row in cells) for i in range(len(cells[0]))]
    assert columns == [
        "case",
        "openai-agents+memory(ref)",
        "openai-agents+sqlite",
        "openai-agents+sqlalchemy+sqlite",
        "status",
    ], "\n".join(header)


def test_framework_warnings_go_to_the_report_and_to_the_terminal_only_with_v(
    tmp_path: Path,
) -> None:
    """The trpc store's warnings are in the report's warnings; the terminal shows them only with -v."""
    pytest.importorskip("trpc_agent_sdk")
    # Events dated in the past (explicit times): trpc's SQL service warns that the
    # session is stale on each append. The harness's own clock no longer provokes it.
    multi = str(tmp_path / "past.jsonl")
    lines = [
        {
            "op": "case",
            "case_id": "past",
            "description": "Events dated in 2023.",
            "reference_only": True,
        },
        {"op": "create_session", "session": "s", "user": "ada", "session_id": "s"},
        *(
            {
                "op": "append_event",
                "session": "s",
                "event_id": f"e{i}",
                "author": "user",
                "text": f"m{i}",
                "time": 1_700_000_000_123_457 + i * 1_234_567,
            }
            for i in range(3)
        ),
    ]
    Path(multi).write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    report_file = tmp_path / "report.json"
    out = replay_cli("run", multi, "-b", "trpc+sqlite", "--report", str(report_file))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "WARNING" not in out.stdout + out.stderr
    assert "framework warning(s)" in out.stdout
    warned = json.loads(report_file.read_text(encoding="utf-8"))["warnings"]
    assert warned and {w["source"] for w in warned} == {"trpc_agent_sdk"}
    loud = replay_cli("run", multi, "-b", "trpc+sqlite", "-v")
    assert loud.returncode == 0, loud.stdout + loud.stderr
    shown = [line for line in loud.stderr.splitlines() if line.startswith("warning: ")]
    assert len(shown) == len(warned)
    assert all(line.startswith("warning: trpc_agent_sdk: ") for line in shown)


def test_quiet_prints_the_summary_line_without_the_table() -> None:
    """With -q the table is left out and the summary line stays."""
    out = replay_cli("run", SINGLE, "-b", "memory,sqlite", "-q")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "┃" not in out.stdout and "1/1 cases agree" in out.stdout


async def test_a_python_warning_becomes_a_record_of_the_one_logger(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A store's warnings.warn during a replay is a WARNING record of FRAMEWORK_LOGGER, in the report."""

    class Warning_(DictStore):
        async def create_session(self, *args: Any, **kwargs: Any) -> str:
            warnings.warn("legacy table layout", UserWarning, stacklevel=1)
            return await super().create_session(*args, **kwargs)

    from steadyloop.replay import FRAMEWORK_LOGGER

    cases = load_cases([Path(SINGLE)])
    with caplog.at_level(logging.WARNING, logger=FRAMEWORK_LOGGER), warnings.catch_warnings():
        warnings.simplefilter("always")
        report = await replay(cases, [DictStore(), Warning_("dict+warn")], workdir=tmp_path)
    assert [w["source"] for w in report.warnings] == ["UserWarning"]
    assert "legacy table layout" in report.to_dict()["warnings"][0]["message"]
    records = [r for r in caplog.records if r.name == FRAMEWORK_LOGGER]
    assert len(records) == 1 and records[0].levelno == logging.WARNING


def test_framework_warnings_stay_off_stderr_without_logging_configured() -> None:
    """A program that configured no logging (a notebook) sees no framework warning on stderr."""
    import subprocess
    import sys

    code = (
        "import logging\n"
        "from steadyloop.replay._warnings import framework_warnings\n"
        "sink = []\n"
        "with framework_warnings(sink):\n"
        "    logging.getLogger('trpc_agent_sdk').warning('Session s1 is stale')\n"
        "assert sink and sink[0]['message'] == 'Session s1 is stale', sink\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
