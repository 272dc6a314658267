"""The one URL parser: aliases, redaction, errors, and the strings each backend is handed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

import pytest

from steadyloop import UnknownBackend
from steadyloop._urls import (
    ALIASES,
    URL,
    as_url,
    parse_url,
    redact_url,
    split_framework,
    split_label,
    split_scheme,
    without_passwords,
)
from steadyloop.journal import SCHEMES


@pytest.mark.parametrize(
    ("text", "family"),
    [
        ("postgres://h/db", "postgresql"),
        ("postgresql://h/db", "postgresql"),
        ("mariadb://h/db", "mysql"),
        ("MySQL://h/db", "mysql"),
        ("rediss://h/0", "redis"),
        ("redis://h/0", "redis"),
        ("sqlite:x.db", "sqlite"),
        ("jsonl:///var/runs", "jsonl"),
        ("memory://", "memory"),
        ("myscheme://x", "myscheme"),
    ],
)
def test_every_alias_reaches_its_family(text: str, family: str) -> None:
    """A scheme is normalised through the one alias table; an unknown one is its own family."""
    assert parse_url(text).family == family


def test_every_journal_family_has_a_backend_and_every_alias_a_family_in_it() -> None:
    """The journal's backend table is keyed by family, and each alias lands on one of its keys."""
    assert set(ALIASES.values()) == set(SCHEMES)


def test_a_scheme_splits_into_qualifiers_family_and_driver() -> None:
    """Words before the family are qualifiers, words after it the driver."""
    assert split_scheme("database+postgres+asyncpg") == (("database",), "postgresql", "asyncpg")
    assert split_scheme("sqlalchemy+sqlite") == (("sqlalchemy",), "sqlite", "")
    assert split_scheme("mysql+asyncmy") == ((), "mysql", "asyncmy")
    url = parse_url("postgresql+psycopg://u@h/db")
    assert (url.scheme, url.family, url.driver, url.qualifiers) == (
        "postgresql+psycopg",
        "postgresql",
        "psycopg",
        (),
    )


def test_the_parts_are_decoded_and_the_query_is_a_dict() -> None:
    """User, password, host, port, database and query come out decoded."""
    url = parse_url("mysql://us%40r:p%3Ass@DB.example:3307/my%20db?prefix=a_&unix_socket=/s")
    assert url.user == "us@r"
    assert url.password == "p:ss"
    assert url.host == "db.example"
    assert url.port == 3307
    assert url.database == "my db"
    assert url.query == {"prefix": "a_", "unix_socket": "/s"}
    assert url.is_sql and not url.is_file


def test_the_password_never_shows_in_repr_str_or_redacted() -> None:
    """Every printed form of a URL hides its password; the text keeps it for the driver."""
    url = parse_url("postgresql://app:s3cret@db/x?prefix=p")
    for shown in (repr(url), str(url), url.redacted, url.where, redact_url(url)):
        assert "s3cret" not in shown
    assert url.redacted == "postgresql://app:***@db/x?prefix=p"
    assert url.where == "postgresql://app:***@db/x"
    assert "s3cret" in url.text
    assert redact_url("sqlite:x.db") == "sqlite:x.db"
    assert without_passwords("at redis://:pw@h:6379/0 and mysql://r:x@h/d") == (
        "at redis://:***@h:6379/0 and mysql://r:***@h/d"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nonsense", "not a URL"),
        ("://x", "not a URL"),
        ("postgresql://u:hunter2@[::1/db", "malformed"),
        ("jsonl://somehost/dir", "takes a path, not a host 'somehost'"),
        ("sqlite:", "names no path"),
    ],
)
def test_a_bad_url_gets_one_error_that_names_it_without_its_password(
    text: str, message: str
) -> None:
    """A malformed URL raises UnknownBackend naming the URL (no password) and the fault."""
    with pytest.raises(UnknownBackend, match=message) as caught:
        parse_url(text).local_path()
    assert "hunter2" not in str(caught.value)


def test_a_bad_port_is_an_error_when_it_is_read() -> None:
    """A port that is not a number fails where a driver needs it, naming the URL."""
    url = parse_url("mysql://root:pw@h:port/db")
    with pytest.raises(UnknownBackend, match=r"'mysql://root:\*\*\*@h:port/db': the port"):
        _ = url.port


def test_file_urls_give_their_path() -> None:
    """``F:///abs``, ``F://localhost/abs`` and ``F:relative`` name the path; ``~`` expands."""
    assert parse_url("sqlite:///tmp/a%20b.db").local_path() == "/tmp/a b.db"
    assert parse_url("sqlite://localhost/tmp/a.db?prefix=p").local_path() == "/tmp/a.db"
    assert parse_url("sqlite:rel/a.db?synchronous=full").local_path() == "rel/a.db"
    assert parse_url("jsonl:~/runs").local_path() == os.path.expanduser("~/runs")


def test_a_memory_url_gives_its_name() -> None:
    """``memory://NAME`` names a shared store; plain ``memory://`` none."""
    assert parse_url("memory://shared?x=1").bare == "shared"
    assert parse_url("memory:shared").bare == "shared"
    assert parse_url("memory://").bare == ""


def test_own_options_come_out_and_the_driver_url_keeps_the_rest() -> None:
    """Steadyloop's own options leave the URL; the libpq and redis-py strings keep the rest."""
    url = parse_url("postgres://u:p@h:5433/db?prefix=a_&sslmode=require&pool_size=3")
    rest, own = url.split_options({"prefix", "pool_size"})
    assert own == {"prefix": "a_", "pool_size": "3"}
    assert rest.build(scheme="postgresql", query=rest.query_items) == (
        "postgresql://u:p@h:5433/db?sslmode=require"
    )
    redis = parse_url("rediss://:pw@h:6380/2?prefix=x&wait_aof=1")
    rest, own = redis.split_options({"prefix", "wait_aof"})
    assert (rest.text, own) == ("rediss://:pw@h:6380/2", {"prefix": "x", "wait_aof": "1"})
    plain = parse_url("sqlite:x.db")
    assert plain.split_options({"prefix"}) == (plain, {})


def test_the_sqlalchemy_url_names_the_given_driver_or_the_default() -> None:
    """A store URL's driver wins; else the family's default; the rest is kept as written."""
    defaults = {"postgresql": "postgresql+psycopg", "mysql": "mysql+asyncmy"}
    assert parse_url("mariadb://r@h/d?x=1").sqlalchemy(defaults) == "mysql+asyncmy://r@h/d?x=1"
    assert (
        parse_url("database+postgres+asyncpg://u:p@h/d").sqlalchemy(defaults)
        == "postgresql+asyncpg://u:p@h/d"
    )
    with pytest.raises(UnknownBackend, match="no SQLAlchemy driver for 'redis'"):
        parse_url("redis://h/0").sqlalchemy(defaults)


def test_a_model_root_gives_its_endpoint_and_a_shown_form_without_secrets() -> None:
    """The base URL's path, query and user info are rebuilt as the model client needs them."""
    root = parse_url("https://us%65r:k%2Fey@gw.example/v1?api-version=2#frag")
    assert root.build(path="/v1/chat/completions", fragment=False) == (
        "https://us%65r:k%2Fey@gw.example/v1/chat/completions?api-version=2"
    )
    assert root.build(userinfo=False, query=(), fragment=False) == "https://gw.example/v1"
    secrets = root.secrets()
    assert {"k/ey", "k%2Fey", "user", "us%65r", "2", "api-version=2", "frag"} <= set(secrets)
    assert secrets == sorted(secrets, key=len, reverse=True)


def test_a_parsed_url_passes_through_as_it_is() -> None:
    """A layer handed a parsed URL uses it; it parses only text."""
    url = parse_url("sqlite:x.db")
    assert as_url(url) is url
    assert isinstance(as_url("sqlite:x.db"), URL)


def test_a_store_selection_splits_into_framework_backend_and_location(tmp_path: Path) -> None:
    """``FRAMEWORK+BACKEND[://…]`` gives the framework, the backend and the parsed location."""
    framework, backend, where = split_framework(f"ADK+database+sqlite://{tmp_path}/a.db")
    assert (framework, backend) == ("adk", "database+sqlite")
    assert where is not None and where.path == f"{tmp_path}/a.db"
    assert where.qualifiers == ("database",) and where.family == "sqlite"
    assert split_framework("adk+memory://") == ("adk", "memory", None)
    assert split_framework("sqlite:///x.db") is None
    assert split_framework("openai-agents+sqlite") == ("openai-agents", "sqlite", None)
    with pytest.raises(UnknownBackend, match="nothing follows the colon"):
        split_framework("adk+sqlite:")


def test_a_label_is_the_text_before_an_equals_sign_that_holds_no_colon() -> None:
    """``LABEL=URL`` splits at the first ``=``; a query's ``=`` is not a label."""
    assert split_label("prod=adk+postgresql://h/db?x=1") == ("prod", "adk+postgresql://h/db?x=1")
    assert split_label("postgresql://h/db?options=-c") == (None, "postgresql://h/db?options=-c")
    with pytest.raises(UnknownBackend, match="LABEL=URL"):
        split_label("a b=sqlite")


@pytest.mark.parametrize(
    "text",
    [
        "sqlite:////tmp/abs.db",
        "sqlite:///tmp/abs.db",
        "sqlite:rel.db",
        "postgresql://u:p%40ss@h:5432/db?sslmode=require#f",
        "memory://",
        "redis://:pw@[::1]:6379/0",
    ],
)
def test_a_url_rebuilt_with_nothing_replaced_is_its_text(text: str) -> None:
    """`build` keeps every part as written, an empty host before a // path included."""
    assert parse_url(text).build() == text


class _TextOnlyJournal:
    """A journal class another package registers in SCHEMES: it is handed text."""

    seen: ClassVar[list[object]] = []

    @classmethod
    async def open(cls, url: object, **options: object) -> object:
        cls.seen.append(url)
        return cls()


async def test_a_class_another_package_registers_is_handed_the_url_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`open_journal` hands a SCHEMES entry outside Steadyloop the text, as documented."""
    from steadyloop.journal import open_journal

    monkeypatch.setitem(SCHEMES, "textonly", (__name__, "_TextOnlyJournal"))
    await open_journal("textonly://h/x?prefix=p")
    assert _TextOnlyJournal.seen == ["textonly://h/x?prefix=p"]


def test_a_url_keeps_its_own_options_over_defaults() -> None:
    """`with_defaults` adds only the options a URL does not name; the URL's own value stays, in any spelling."""
    url = parse_url("postgresql://u@h:5/db?tcp_user_timeout=5000&sslmode=disable")
    full = url.with_defaults((("tcp_user_timeout", "20000"), ("keepalives", "1")))
    assert full.query == {"tcp_user_timeout": "5000", "sslmode": "disable", "keepalives": "1"}
    assert url.with_defaults((("sslmode", "require"),)) is url


def test_postgres_connections_get_tcp_timeouts_unless_the_url_sets_them() -> None:
    """Every PostgreSQL connection string carries keepalives and a tcp_user_timeout, the user's own values winning, and messages show the URL as written."""
    pytest.importorskip("psycopg")
    from steadyloop.journal._postgres import PostgresJournal

    plain = PostgresJournal("postgresql://u@h:5/db?prefix=p_")
    got = dict(parse_url(plain._conninfo).query_items)
    assert got == {
        "keepalives": "1",
        "keepalives_idle": "10",
        "keepalives_interval": "5",
        "keepalives_count": "3",
        "tcp_user_timeout": "20000",
    }
    mine = PostgresJournal("postgresql://u@h:5/db?tcp_user_timeout=3000&keepalives_idle=2")
    got = dict(parse_url(mine._conninfo).query_items)
    assert got["tcp_user_timeout"] == "3000" and got["keepalives_idle"] == "2"
    assert got["keepalives_count"] == "3"
    assert "keepalives" not in plain._dialect.location_name
