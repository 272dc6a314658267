"""The how-to guides stay true: their example files run, and their quotes match the code."""

from __future__ import annotations

import importlib
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from docs_support import DOCS, build_env

BACKEND_HOWTO = DOCS / "en" / "how-to" / "write-a-backend.md"
SERVERS_HOWTO = DOCS / "en" / "how-to" / "server-backends.md"

# A fenced block whose first line names a file: "# dict_journal.py", "# pyproject.toml".
_FILE_BLOCK = re.compile(
    r"^```(?:python|toml)\n# (?P<name>[\w.-]+\.(?:py|toml))\n(?P<code>.*?)^```", re.S | re.M
)


def example_files(page: Path) -> dict[str, str]:
    """The files a page shows, by name, each exactly as the page prints it."""
    text = page.read_text(encoding="utf-8")
    return {m["name"]: f"# {m['name']}\n{m['code']}" for m in _FILE_BLOCK.finditer(text)}


def test_backend_howto_shows_its_files() -> None:
    """The guide shows a backend module, its test module and the pytest setting."""
    assert set(example_files(BACKEND_HOWTO)) == {
        "dict_journal.py",
        "test_dict_journal.py",
        "pyproject.toml",
    }


@pytest.mark.slow
def test_backend_howto_passes_the_conformance_suite(tmp_path: Path) -> None:
    """The guide's dict backend, run as the guide says, passes every conformance test.

    Only the multi-process test is skipped, for the reason the guide gives: the store
    lives in one process. Warnings are errors, so the guide's setup is clean too.
    """
    from steadyloop.testing import JournalConformance

    for name, code in example_files(BACKEND_HOWTO).items():
        (tmp_path / name).write_text(code, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-W", "error", "-q", "-rs"],
        cwd=tmp_path,
        env=build_env(),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    tests = [n for n in dir(JournalConformance) if n.startswith("test_")]
    summary = out.strip().splitlines()[-1]
    assert f"{len(tests) - 1} passed, 1 skipped" in summary, summary
    assert "no URL to share" in out


# -- quotes of the backends' durability statements ------------------------------------

SERVER_MODULES = [
    "steadyloop.journal._postgres",
    "steadyloop.journal._redis",
    "steadyloop.journal._mysql",
]


def _normalise(text: str) -> str:
    """Docstring and page Markdown in one form: cross-references as their title, one quote."""
    text = re.sub(r"\[([^\]]+)\]\[[\w.]+\]", r"\1", text)
    text = text.replace("``", "`").replace("`", "")
    return re.sub(r"\s+", " ", text).strip()


def blockquotes(page: Path) -> list[str]:
    """The text of each blockquote of a page."""
    quotes: list[list[str]] = []
    previous_was_quote = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith(">"):
            if not previous_was_quote:
                quotes.append([])
            quotes[-1].append(line[1:].strip())
            previous_was_quote = True
        else:
            previous_was_quote = False
    return [" ".join(q) for q in quotes]


def test_durability_quotes_are_word_for_word() -> None:
    """Each server backend's durability statement is quoted exactly from its docstring."""
    pytest.importorskip("psycopg")
    pytest.importorskip("redis")
    pytest.importorskip("asyncmy")
    docstrings = {m: _normalise(importlib.import_module(m).__doc__ or "") for m in SERVER_MODULES}
    quoted: dict[str, str] = {}
    for quote in blockquotes(SERVERS_HOWTO):
        text = _normalise(quote)
        sources = [m for m, doc in docstrings.items() if text in doc]
        assert sources, f"not a quote of any backend docstring: {text[:200]}"
        quoted[sources[0]] = text
    assert set(quoted) == set(SERVER_MODULES)
    for module, text in quoted.items():
        assert text.startswith("Durability"), module


# -- write a replay case ---------------------------------------------------------------

REPLAY_HOWTO = DOCS / "en" / "how-to" / "write-a-replay-case.md"
_TITLED_BLOCK = re.compile(r'^```\w+ title="(?P<name>[\w.-]+)"\n(?P<body>.*?)^```', re.S | re.M)
_COMMAND = re.compile(r"^steadyloop (?P<args>replay run [^\n]+)\necho \$\?\s+# (?P<code>\d)", re.M)


def titled_blocks(page: Path) -> dict[str, str]:
    """Files a page shows in blocks with a ``title="name"``, exactly as printed."""
    text = page.read_text(encoding="utf-8")
    return {m["name"]: m["body"] for m in _TITLED_BLOCK.finditer(text)}


def test_replay_howto_shows_its_cases() -> None:
    """The guide shows a passing case, a failing one and an invalid one, in both languages."""
    assert set(titled_blocks(REPLAY_HOWTO)) == {"order_status.jsonl", "typo.jsonl", "broken.jsonl"}
    zh = DOCS / "zh" / "how-to" / "write-a-replay-case.md"
    assert titled_blocks(zh) == titled_blocks(REPLAY_HOWTO)


@pytest.mark.slow
def test_replay_howto_commands_exit_as_the_guide_says(tmp_path: Path) -> None:
    """Each `steadyloop replay run` of the guide exits with the status the guide prints.

    The reports it writes validate against the shipped schema, and the difference the
    guide quotes is the one the report holds.
    """
    import jsonschema

    from steadyloop.replay import report_schema

    for name, body in titled_blocks(REPLAY_HOWTO).items():
        (tmp_path / name).write_text(body, encoding="utf-8")
    text = REPLAY_HOWTO.read_text(encoding="utf-8")
    commands = [(m["args"], int(m["code"])) for m in _COMMAND.finditer(text)]
    assert sorted(code for _, code in commands) == [0, 1, 2]
    for args, code in commands:
        proc = subprocess.run(
            [sys.executable, "-m", "steadyloop", *shlex.split(args)],
            cwd=tmp_path,
            env=build_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == code, f"{args}: {proc.stdout}{proc.stderr}"
    for report in ("report.json", "typo.json"):
        jsonschema.validate(json.loads((tmp_path / report).read_text()), report_schema())
    typo = json.loads((tmp_path / "typo.json").read_text())
    quoted = json.loads(text.split("the first reads:\n\n```json\n", 1)[1].split("```", 1)[0])
    assert typo["cases"][0]["differences"][0] == quoted
    assert json.loads((tmp_path / "report.json").read_text())["ok"] is True


# -- run workers on several machines -----------------------------------------------------

WORKERS_HOWTO = DOCS / "en" / "how-to" / "workers-on-several-machines.md"


def test_workers_howto_shows_its_agent_module() -> None:
    """The guide's agent module is a file the test can run."""
    assert set(example_files(WORKERS_HOWTO)) == {"agents.py"}


@pytest.mark.slow
@pytest.mark.server
async def test_workers_howto_runs_on_postgresql(tmp_path: Path) -> None:
    """The guide's commands, against a real PostgreSQL, with two worker processes.

    Two `audit work` processes stand for two machines sharing one queue and one journal;
    every task completes, and each is claimed exactly once.
    """
    from backends import remove_prefix, require_server, unique_prefix, with_options

    base = await require_server("postgres")
    prefix = unique_prefix("postgres")
    store = with_options(base, prefix=prefix)
    for name, code in example_files(WORKERS_HOWTO).items():
        (tmp_path / name).write_text(code, encoding="utf-8")
    env = build_env() | {"STEADYLOOP_AUDIT_STORE": store, "PYTHONPATH": str(tmp_path)}
    text = WORKERS_HOWTO.read_text(encoding="utf-8")
    commands = [line for line in text.splitlines() if line.startswith("steadyloop audit ")]
    other_app = [c for c in commands if "--app" in c]  # the section on several apps
    commands = [c for c in commands if "--app" not in c]
    submits = [c for c in commands if c.startswith("steadyloop audit submit")]
    work = next(c for c in commands if c.startswith("steadyloop audit work"))
    assert len(submits) >= 2

    def cli(command: str) -> list[str]:
        return [sys.executable, "-m", "steadyloop", *shlex.split(command)[1:]]

    def run(command: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            cli(command),
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    try:
        for command in submits:
            done = run(command, timeout=120)
            assert done.returncode == 0, done.stderr
        machines = [
            subprocess.Popen(
                cli(work),
                cwd=tmp_path,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for _ in range(2)
        ]
        for machine in machines:
            out, _ = machine.communicate(timeout=180)
            assert machine.returncode == 0, out

        from steadyloop.audit import TaskBoard

        async with await TaskBoard.open(store) as board:
            for n in range(1, len(submits) + 1):
                row = await board.get(f"greet-{n}")
                assert row.status.value == "completed"
                kinds = [r.kind for r in await board.trail(f"greet-{n}")]
                assert kinds.count("task.claimed") == 1, kinds
        for command in other_app:
            done = run(command, timeout=180)
            assert done.returncode == 0, done.stdout + done.stderr
        async with await TaskBoard.open(store, app="billing") as board:
            assert (await board.get("march")).status.value == "completed"
            assert [t.task_id for t in await board.tasks()] == ["march"]
    finally:
        await remove_prefix("postgres", base, prefix)


BACKENDS_PAGE = "explanation/backends.md"


def test_backends_page_quotes_the_durability_statements() -> None:
    """The backends page quotes each server's durability statement word for word.

    In English, from the module docstring; in Chinese, from the translation the server
    how-to gives in full, so the two Chinese pages cannot say different things.
    """
    pytest.importorskip("psycopg")
    pytest.importorskip("redis")
    pytest.importorskip("asyncmy")
    docstrings = [_normalise(importlib.import_module(m).__doc__ or "") for m in SERVER_MODULES]
    quotes = [_normalise(q) for q in blockquotes(DOCS / "en" / BACKENDS_PAGE)]
    assert len(quotes) == len(SERVER_MODULES)
    for quote, doc in zip(quotes, docstrings, strict=True):
        assert quote.startswith("Durability") and quote in doc, quote[:120]
    zh_full = " ".join(
        _normalise(q) for q in blockquotes(DOCS / "zh" / "how-to" / "server-backends.md")
    )
    zh_quotes = [_normalise(q) for q in blockquotes(DOCS / "zh" / BACKENDS_PAGE)]
    assert len(zh_quotes) == len(SERVER_MODULES)
    for quote in zh_quotes:
        assert quote in zh_full, quote[:80]
