"""Framework stores: the hostile pack's time on every store, and what each store agrees on.

Run: ``uv run python benchmarks/bench_frameworks.py [--repeat 1] [--no-servers] [--events 2000]``

Measured in one run and written to ``benchmarks/results/frameworks.json``: for every
store of every framework the package ships an adapter for (and Steadyloop's own six
journals), the seconds the hostile-values pack takes on it (the sum of its case runs:
operations, restarts and read-backs; the median of ``--repeat`` runs), and how its cases
came out against its framework's reference — agreed, diverged, not applicable. Each
framework's stores run in one ``replay`` call, so each is compared with that framework's
in-memory store (Steadyloop's with ``sqlite``), at the versions pinned in
``pyproject.toml``. Server stores run on the PostgreSQL, MariaDB and Redis named by
``STEADYLOOP_POSTGRES_URL``, ``STEADYLOOP_MYSQL_URL`` and ``STEADYLOOP_REDIS_URL`` (the
local servers by default), each framework in a schema or database of its own that is
dropped afterwards.

In the same run, one case appending ``--events`` events (2,000 by default) to one
session runs on every store, each store in a child process of its own with its
reference (``bench_replay.py``'s long case): ``long_case_s`` is the seconds it took on
the store (operations, restarts and read-back), ``long_case_agreed`` whether the store's
snapshot agreed with its reference's. The aim is at most 60 s on every store; a store
still running after ``--budget`` seconds (180 by default) is stopped and recorded as
``timed_out``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import _measured
from bench_replay import _long_case
from steadyloop.replay import load_cases, pack_cases, parse_store_url, replay

SUMMARY_ZH = "框架的存储：敌意用例包在每个存储上的耗时，以及每个存储与参照一致的地方。"
"""The first line of this docstring in Chinese, for the performance page."""

RESULTS = Path(__file__).parent / "results" / "frameworks.json"
PG = os.environ.get("STEADYLOOP_POSTGRES_URL") or "postgresql://postgres@127.0.0.1:5432/test"
MY = os.environ.get("STEADYLOOP_MYSQL_URL") or "mysql://root@127.0.0.1:3306/test"
REDIS = os.environ.get("STEADYLOOP_REDIS_URL") or "redis://127.0.0.1:6379/0"
PACKAGES = {
    "trpc": "trpc-agent-py",
    "adk": "google-adk",
    "openai-agents": "openai-agents",
    "langgraph": "langgraph-checkpoint",
    "langgraph-store": "langgraph",
    "steadyloop": "steadyloop",
}


def _rest(url: str) -> str:
    """A URL without its scheme: ``//user@host:port/db?…``."""
    return url[url.index(":") + 1 :]


def _with_db(url: str, database: str) -> str:
    return urlsplit(url)._replace(path=f"/{database}").geturl()


def _with_schema(url: str, schema: str) -> str:
    parts = urlsplit(url)
    query = "&".join(
        q for q in (parts.query, urlencode({"options": f"-csearch_path={schema}"})) if q
    )
    return parts._replace(query=query).geturl()


FRAMEWORKS = ("steadyloop", "trpc", "adk", "openai-agents", "langgraph", "langgraph-store")


def stores(framework: str, space: str, servers: bool) -> list[str]:
    """The store URLs of one framework: embedded ones, then (with servers) the server ones.

    ``space`` names the framework's own PostgreSQL schema and MariaDB database (trpc and
    ADK both write tables named ``sessions`` and ``events``), and its Redis key prefix.
    """
    pg, my = _rest(_with_schema(PG, space)), _rest(_with_db(MY, space))
    redis = _rest(REDIS)
    sep = {url: "&" if "?" in url else "?" for url in (PG, MY, REDIS)}
    embedded = {
        "steadyloop": ["sqlite", "memory", "jsonl"],
        "trpc": ["trpc+memory", "trpc+sqlite"],
        "adk": ["adk+memory", "adk+sqlite", "adk+database+sqlite"],
        "openai-agents": [
            "openai-agents+memory",
            "openai-agents+sqlite",
            "openai-agents+sqlalchemy+sqlite",
        ],
        "langgraph": ["langgraph+memory", "langgraph+sqlite", "langgraph+async+sqlite"],
        "langgraph-store": ["langgraph-store+memory", "langgraph-store+sqlite"],
    }[framework]
    server = {
        "steadyloop": [
            f"postgresql:{_rest(PG)}{sep[PG]}prefix={space}_",
            f"redis:{redis}{sep[REDIS]}prefix={space}:",
            f"mysql:{_rest(MY)}{sep[MY]}prefix={space}_",
        ],
        "trpc": [f"trpc+postgresql:{pg}", f"trpc+mysql:{my}", f"trpc+redis:{redis}"],
        "adk": [f"adk+postgresql:{pg}", f"adk+mysql:{my}"],
        "openai-agents": [
            f"openai-agents+postgresql:{pg}",
            f"openai-agents+mysql:{my}",
            f"openai-agents+mysql:{my}{'&' if '?' in my else '?'}tables=adapter",
            f"openai-agents+redis:{redis}{sep[REDIS]}key_prefix={space}:",
        ],
        "langgraph": [f"langgraph+postgresql:{pg}", f"langgraph+async+postgresql:{pg}"],
        "langgraph-store": [f"langgraph-store+postgresql:{pg}"],
    }[framework]
    return embedded + (server if servers else [])


@contextlib.contextmanager
def server_space(spaces: list[str], servers: bool) -> Iterator[None]:
    """Create a PostgreSQL schema and a MariaDB database per name; drop them afterwards."""
    if not servers:
        yield
        return
    import psycopg
    import pymysql

    parts = urlsplit(MY)

    def mysql(statement: str) -> None:
        conn = pymysql.connect(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 3306,
            user=parts.username or "root",
            password=parts.password or "",
        )
        try:
            with conn.cursor() as cur:
                cur.execute(statement)
        finally:
            conn.close()

    try:
        for space in spaces:
            with psycopg.connect(PG, autocommit=True) as conn:
                conn.execute(f'CREATE SCHEMA "{space}"')
            mysql(f"CREATE DATABASE `{space}`")
        yield
    finally:
        for space in spaces:
            with psycopg.connect(PG, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{space}" CASCADE')
            mysql(f"DROP DATABASE IF EXISTS `{space}`")


async def run_framework(
    framework: str, urls: list[str], repeat: int, events: int, budget: float
) -> dict[str, dict[str, Any]]:
    """Run the pack on one framework's stores ``repeat`` times; the rows of its stores."""
    cases = load_cases([pack_cases("hostile")])
    seconds: dict[str, list[float]] = {}
    outcome: dict[str, dict[str, int]] = {}
    reference = ""
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="bench-frameworks-") as workdir:
            report = await replay(cases, urls, workdir=workdir)
        data = report.to_dict()
        reference = data["references"][framework]
        per: dict[str, float] = {}
        for run in data["timings"]["runs"]:
            per[run["backend"]] = per.get(run["backend"], 0.0) + run["seconds"]
        for store, total in per.items():
            seconds.setdefault(store, []).append(total)
        for case in data["cases"]:
            diverged = {d["backend"] for d in case["differences"]}
            for run in case["runs"]:
                store = run["backend"]
                if store == reference:
                    continue
                key = (
                    "not_applicable"
                    if run["status"] == "not_applicable"
                    else ("diverged" if store in diverged else "agreed")
                )
                counts = outcome.setdefault(
                    store, {"agreed": 0, "diverged": 0, "not_applicable": 0}
                )
                counts[key] += 1
    rows: dict[str, dict[str, Any]] = {}
    long_rows = await run_long_case(framework, urls, events, budget)
    for store, values in seconds.items():
        row: dict[str, Any] = {"pack_median_s": round(statistics.median(values), 3)}
        if store in outcome:
            row.update({k: v // repeat for k, v in outcome[store].items()})
        else:
            row["reference"] = True
        row["framework"] = framework
        row.update(long_rows.get(store, {}))
        rows[store if "+" in store else f"{framework}+{store}"] = row
    return rows


async def run_long_case(
    framework: str, urls: list[str], events: int, budget: float
) -> dict[str, dict[str, Any]]:
    """One ``events``-event session on each of one framework's stores, a process each.

    Each store runs in a child process (``--long-only URL``) with its reference, so a
    store that has not finished within ``budget`` seconds can be stopped for certain:
    the child is killed, the store recorded as ``timed_out`` (with no time), and its
    leftover Redis keys removed (its SQL tables go with the framework's schema).
    """
    out: dict[str, dict[str, Any]] = {}
    for url in urls:
        spec = parse_store_url(url, Path("."))
        name = spec.name if spec is not None else url.split(":", 1)[0]
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--long-only",
            url,
            "--events",
            str(events),
            stdout=asyncio.subprocess.PIPE,
        )
        try:
            stdout, _ = await asyncio.wait_for(child.communicate(), budget)
        except TimeoutError:
            child.kill()
            await child.wait()
            out[name] = {"long_case_s": None, "long_case_status": "timed_out"}
            print(f"  {events} events on {name}: over {budget:g} s, stopped", flush=True)
            _drop_redis_keys(f"*replay.long_{events}.*")
            continue
        found: dict[str, dict[str, Any]] = json.loads(stdout.decode().splitlines()[-1])
        for store, row in found.items():
            if store == name or store not in out:
                out[store] = row
                print(f"  {events} events on {store}: {row['long_case_s']} s", flush=True)
    return out


async def long_only(url: str, events: int) -> dict[str, dict[str, Any]]:
    """The child of `run_long_case`: the long case on one store (and its reference)."""
    case = _long_case(events)
    with tempfile.TemporaryDirectory(prefix="bench-frameworks-long-") as workdir:
        report = await replay([case], [url], workdir=workdir)
    data = report.to_dict()
    diverged = {d["backend"] for c in data["cases"] for d in c["differences"]}
    status = {r["backend"]: r["status"] for c in data["cases"] for r in c["runs"]}
    return {
        run["backend"]: {
            "long_case_s": round(run["seconds"], 3),
            "long_case_status": status[run["backend"]],
            "long_case_agreed": run["backend"] not in diverged,
        }
        for run in data["timings"]["runs"]
    }


def _drop_redis_keys(pattern: str) -> None:
    """Remove what a stopped run left in Redis (its keys hold the case's app name)."""
    import redis

    client = redis.Redis.from_url(REDIS)
    try:
        for key in client.scan_iter(match=pattern, count=1000):
            client.delete(key)
    finally:
        client.close()


def _quiet() -> None:
    # trpc-agent-py prints a warning to stdout for every append dated in the past.
    quiet = logging.getLogger("trpc_agent_sdk")
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    warnings.simplefilter("ignore")  # frameworks' own deprecation and SQLAlchemy warnings


async def main_async(repeat: int, servers: bool, events: int, budget: float) -> dict[str, Any]:
    _quiet()
    token = uuid.uuid4().hex[:8]
    spaces = {f: f"bench_{f.replace('-', '_')}_{token}" for f in FRAMEWORKS}
    rows: dict[str, dict[str, Any]] = {}
    walls: dict[str, float] = {}
    cases = len(load_cases([pack_cases("hostile")]))
    with server_space(list(spaces.values()), servers):
        for framework in FRAMEWORKS:
            urls = stores(framework, spaces[framework], servers)
            started = time.perf_counter()
            rows.update(await run_framework(framework, urls, repeat, events, budget))
            walls[framework] = round(time.perf_counter() - started, 3)
    versions = {}
    for framework, package in PACKAGES.items():
        with contextlib.suppress(PackageNotFoundError):
            versions[framework] = version(package)
    return {
        "benchmark": "frameworks",
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "pack": "hostile",
        "cases": cases,
        "repeat": repeat,
        "long_case": {"events": events, "aim_seconds": 60.0, "budget_seconds": budget},
        "versions": versions,
        "wall_seconds": walls,
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--no-servers", dest="servers", action="store_false")
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--budget", type=float, default=180.0)
    parser.add_argument("--long-only", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.long_only:
        _quiet()
        print(json.dumps(asyncio.run(long_only(args.long_only, args.events))))
        return
    # A terminated run still drops the schemas and databases it made (``server_space``).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    measured = _measured.start()
    result = asyncio.run(main_async(args.repeat, args.servers, args.events, args.budget))
    result["measured"] = measured.entry()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    for store, row in result["rows"].items():
        counts = (
            "reference"
            if row.get("reference")
            else f"{row['agreed']} agreed, {row['diverged']} diverged, "
            f"{row['not_applicable']} not applicable"
        )
        print(
            f"{store:<32} {row['pack_median_s']:>8.3f} s   {counts}; "
            f"{result['long_case']['events']} events {row['long_case_s']} s "
            f"({row['long_case_status']})"
        )
    print(f"versions {result['versions']}; written to {RESULTS}")


if __name__ == "__main__":
    main()
