"""The one URL parser: journal, queue, store and model URLs are read here and nowhere else.

A URL is parsed once, where it enters (the CLI, `open_journal`, `TaskBoard.open`, a replay
`--backends` selection), into a frozen [`URL`][steadyloop.journal.URL]. Each layer below
takes that object: it asks it for the family (`postgresql` for `postgres://`), the parts a
driver needs, its own query options, or the string a driver takes, and never splits the
text again. Scheme aliases live in one table, `ALIASES`.

Examples:
    >>> url = parse_url("postgres://app:s3cret@db:5433/runs?prefix=a_")
    >>> url.family, url.host, url.port, url.database, url.query["prefix"]
    ('postgresql', 'db', 5433, 'runs', 'a_')
    >>> url.redacted
    'postgres://app:***@db:5433/runs?prefix=a_'
    >>> url.split_options({"prefix"})[0].build(scheme="postgresql")
    'postgresql://app:s3cret@db:5433/runs'
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from steadyloop._errors import UnknownBackend

__all__ = [
    "ALIASES",
    "FILE_FAMILIES",
    "SQL_FAMILIES",
    "URL",
    "as_url",
    "bad_url",
    "parse_url",
    "redact_url",
    "split_framework",
    "split_label",
    "split_scheme",
    "without_passwords",
]

ALIASES: Final[Mapping[str, str]] = {
    "memory": "memory",
    "jsonl": "jsonl",
    "sqlite": "sqlite",
    "postgresql": "postgresql",
    "postgres": "postgresql",
    "mysql": "mysql",
    "mariadb": "mysql",
    "redis": "redis",
    "rediss": "redis",
}
"""Every scheme word Steadyloop knows, to its family: the one alias table."""

SQL_FAMILIES: Final = frozenset({"sqlite", "postgresql", "mysql"})
"""The families whose journal is a SQL one (a task queue runs on it)."""

FILE_FAMILIES: Final = frozenset({"sqlite", "jsonl"})
"""The families whose URL names a local path (``F:///abs`` or ``F:relative``)."""

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*$")
_PASSWORD_IN_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*:)[^@\s]*@")
_FRAMEWORK = re.compile(
    r"^(?P<framework>[A-Za-z][A-Za-z0-9_.-]*)\+(?P<backend>[A-Za-z][A-Za-z0-9_.+-]*)"
)
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


def split_scheme(scheme: str) -> tuple[tuple[str, ...], str, str]:
    """Split a scheme into its qualifiers, its family and its driver.

    The family is the first ``+``-word that `ALIASES` knows, normalised; the words
    before it are qualifiers (an adapter's ``database+``), the words after it the driver
    (SQLAlchemy's ``+asyncpg``). A scheme with no known word is its own family.

    Examples:
        >>> split_scheme("database+postgres+asyncpg")
        (('database',), 'postgresql', 'asyncpg')
        >>> split_scheme("MariaDB")
        ((), 'mysql', '')
        >>> split_scheme("myscheme")
        ((), 'myscheme', '')
    """
    words = scheme.lower().split("+")
    for i, word in enumerate(words):
        if word in ALIASES:
            return tuple(words[:i]), ALIASES[word], "+".join(words[i + 1 :])
    return (), words[0], "+".join(words[1:])


def without_passwords(text: str) -> str:
    """Return `text` with the password of every URL in it replaced by `***`.

    For messages that quote URLs Steadyloop did not build itself (a driver's error).

    Examples:
        >>> without_passwords("cannot reach postgresql://app:s3cret@db/x")
        'cannot reach postgresql://app:***@db/x'
    """
    return _PASSWORD_IN_URL.sub(r"\1***@", text)


def redact_url(url: str | URL) -> str:
    """Return ``url`` with any password replaced by ``***``.

    Examples:
        >>> redact_url("redis://:pw@localhost:6379/0")
        'redis://:***@localhost:6379/0'
    """
    if isinstance(url, URL):
        return url.redacted
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # not even urlsplit reads it: hide what looks like a password
        return without_passwords(url)
    if password is None:
        return url
    netloc = parts.netloc.replace(f":{password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def bad_url(url: str | URL, problem: str) -> UnknownBackend:
    """The one error of a malformed URL: the URL (no password) and what is wrong with it.

    Examples:
        >>> str(bad_url("mysql://root:pw@db", "the URL names no database"))
        "'mysql://root:***@db': the URL names no database"
    """
    return UnknownBackend(f"{redact_url(url)!r}: {problem}")


@dataclass(frozen=True, repr=False)
class URL:
    """A parsed URL: what every layer takes instead of the text.

    Attributes:
        text: The URL as given (it may hold a password: show `redacted` instead).
        scheme: The whole scheme, lower case (``postgres``, ``database+sqlite``).
        family: The scheme's family through `ALIASES` (``postgresql`` for
            ``postgres``, ``mysql`` for ``mariadb``, ``redis`` for ``rediss``).
        qualifiers: Scheme words before the family (``("database",)``).
        driver: Scheme words after the family (``asyncpg``); ``""`` when none.
        user: The user name, decoded; ``None`` when absent.
        password: The password, decoded; ``None`` when absent.
        host: The host name, lower case; ``None`` when absent.
        path: The path, decoded.
        netloc: The authority as written (``user:pw@host:port``).
        raw_path: The path as written.
        raw_query: The query as written.
        fragment: The fragment as written.
        opaque: Everything after ``scheme:`` up to the query, as written.
        has_authority: Whether ``//`` follows the colon.
    """

    text: str
    scheme: str
    family: str
    qualifiers: tuple[str, ...]
    driver: str
    user: str | None
    password: str | None
    host: str | None
    path: str
    netloc: str
    raw_path: str
    raw_query: str
    fragment: str
    opaque: str
    has_authority: bool

    def __repr__(self) -> str:
        return f"URL({self.redacted!r})"

    def __str__(self) -> str:
        return self.redacted

    @property
    def redacted(self) -> str:
        """The URL with any password replaced by ``***``, for messages."""
        if self.password is None:
            return self.text
        return redact_url(self.text)

    @property
    def where(self) -> str:
        """The redacted URL without query or fragment: where the store is, for messages."""
        return redact_url(self.build(query=(), fragment=False))

    @property
    def port(self) -> int | None:
        """The port; ``None`` when absent.

        Raises:
            UnknownBackend: The port is not a number from 0 to 65535.
        """
        try:
            return urlsplit(self.text).port
        except ValueError:
            raise bad_url(self, "the port is not a number from 0 to 65535") from None

    @property
    def query_items(self) -> tuple[tuple[str, str], ...]:
        """The query's pairs, decoded, in order (blank values kept)."""
        return tuple(parse_qsl(self.raw_query, keep_blank_values=True))

    @property
    def query(self) -> dict[str, str]:
        """The query as a dict (the last of a repeated key wins)."""
        return dict(self.query_items)

    @property
    def database(self) -> str:
        """The path without its leading ``/``: a server URL's database (``""``: none)."""
        return self.path.lstrip("/")

    @property
    def bare(self) -> str:
        """What follows ``scheme:`` without slashes or query: ``memory://NAME``'s name."""
        return self.opaque.lstrip("/")

    @property
    def is_sql(self) -> bool:
        """Whether the URL names a SQL journal (SQLite, PostgreSQL, MySQL/MariaDB)."""
        return self.family in SQL_FAMILIES

    @property
    def is_file(self) -> bool:
        """Whether the URL names a local path (SQLite, JSONL)."""
        return self.family in FILE_FAMILIES

    def local_path(self) -> str:
        """The path of a file URL: ``F:///abs/path``, ``F://localhost/p`` or ``F:relative``.

        ``~`` is expanded.

        Raises:
            UnknownBackend: The URL names a host other than ``localhost``, or no path.
        """
        if self.has_authority:
            if self.netloc not in ("", "localhost"):
                raise bad_url(
                    self,
                    f"a {self.scheme} URL takes a path, not a host {self.netloc!r}; "
                    f"write {self.scheme}:///absolute/path or {self.scheme}:relative/path",
                )
            path = self.path
        else:
            path = unquote(self.opaque)
        if not path:
            raise bad_url(self, f"the {self.scheme} URL names no path")
        return os.path.expanduser(path)

    def split_options(self, names: Collection[str]) -> tuple[URL, dict[str, str]]:
        """Take Steadyloop's own query options out of the URL.

        Returns:
            The URL without those options (this one when it holds none) and their
            values.
        """
        items = self.query_items
        own = {k: v for k, v in items if k in names}
        if not own:
            return self, own
        rest = [(k, v) for k, v in items if k not in names]
        return parse_url(self.build(query=rest)), own

    def with_defaults(self, defaults: Sequence[tuple[str, str]]) -> URL:
        """The URL with each of ``defaults`` added to its query where it names no value.

        An option the URL already holds (in any spelling of its value) is the user's,
        and stays as written.
        """
        present = {k for k, _ in self.query_items}
        missing = [(k, v) for k, v in defaults if k not in present]
        if not missing:
            return self
        return parse_url(self.build(query=[*self.query_items, *missing]))

    def build(
        self,
        *,
        scheme: str | None = None,
        path: str | None = None,
        query: Sequence[tuple[str, str]] | None = None,
        userinfo: bool = True,
        fragment: bool = True,
    ) -> str:
        """The URL's text with parts replaced: the string a driver is handed.

        Args:
            scheme: A new scheme (``postgresql`` for libpq, ``mysql+asyncmy``, …).
            path: A new path, as it is to be written.
            query: New query pairs (encoded here); ``None`` keeps the query as written.
            userinfo: ``False`` drops the user and password.
            fragment: ``False`` drops the fragment.
        """
        netloc = self.netloc if userinfo else self.netloc.rpartition("@")[2]
        # Joined by hand: urlunsplit turns ``sqlite:////abs`` (an empty host and a path
        # that starts with //) into ``sqlite://abs``.
        text = f"{self.scheme if scheme is None else scheme}:"
        if self.has_authority:
            text += f"//{netloc}"
        text += self.raw_path if path is None else path
        raw_query = self.raw_query if query is None else urlencode(list(query))
        if raw_query:
            text += f"?{raw_query}"
        if fragment and self.fragment:
            text += f"#{self.fragment}"
        return text

    def sqlalchemy(
        self, defaults: Mapping[str, str], query: Sequence[tuple[str, str]] | None = None
    ) -> str:
        """The SQLAlchemy URL: ``FAMILY+DRIVER://…``, the URL's driver or the family's default.

        Args:
            defaults: The family's default ``dialect+driver`` (``{"mysql": "mysql+asyncmy"}``).
            query: New query pairs, as for `build`.

        Raises:
            UnknownBackend: The family has no SQLAlchemy dialect here.
        """
        if self.driver:
            scheme = f"{self.family}+{self.driver}"
        elif self.family in defaults:
            scheme = defaults[self.family]
        else:
            raise bad_url(self, f"no SQLAlchemy driver for {self.family!r}")
        return self.build(scheme=scheme, query=query)

    def secrets(self) -> list[str]:
        """What a message must not show: user info, query values and fragment, longest first.

        Each is listed as written and decoded.
        """
        values = [v for _, v in self.query_items if v]
        userinfo = self.netloc.rpartition("@")[0]
        raw_user, _, raw_password = userinfo.partition(":")
        found = [self.password, raw_password, self.raw_query, self.fragment, self.user, raw_user]
        found += values
        return sorted({x for s in found if s for x in (s, unquote(s))}, key=len, reverse=True)


def parse_url(text: str) -> URL:
    """Parse a URL once; every layer then takes the result.

    Raises:
        UnknownBackend: The text is not a URL (no ``scheme:``), or its authority is
            malformed (an unclosed ``[``); the message names the URL without its
            password.
    """
    if not isinstance(text, str):
        raise UnknownBackend(f"{text!r} is not a URL (a {type(text).__name__})")
    scheme, colon, rest = text.partition(":")
    if not colon or not _SCHEME.match(scheme):
        raise bad_url(text, "not a URL: it starts with no SCHEME: (for example sqlite:FILE)")
    try:
        parts = urlsplit(text)
        user, password, host = parts.username, parts.password, parts.hostname
    except ValueError as exc:
        raise bad_url(text, f"malformed: {exc}") from None
    qualifiers, family, driver = split_scheme(scheme)
    return URL(
        text=text,
        scheme=scheme.lower(),
        family=family,
        qualifiers=qualifiers,
        driver=driver,
        user=unquote(user) if user is not None else None,
        password=unquote(password) if password is not None else None,
        host=host,
        path=unquote(parts.path),
        netloc=parts.netloc,
        raw_path=parts.path,
        raw_query=parts.query,
        fragment=parts.fragment,
        opaque=rest.split("?", 1)[0],
        has_authority=rest.startswith("//"),
    )


def as_url(url: str | URL) -> URL:
    """`url` itself when it is parsed already, else `parse_url(url)`."""
    return url if isinstance(url, URL) else parse_url(url)


def split_label(text: str) -> tuple[str | None, str]:
    """Split a ``LABEL=URL`` selection into its label and the rest.

    The label is the text before the first ``=`` when that text holds no ``:`` (so the
    ``=`` of a URL's query, as in ``postgresql://h/db?options=…``, is never read as one).

    Raises:
        UnknownBackend: The label is empty or holds other than letters, digits and
            ``_ . + -``, or nothing follows the ``=``.

    Examples:
        >>> split_label("prod=adk+postgresql://db/app")
        ('prod', 'adk+postgresql://db/app')
        >>> split_label("postgresql://db/app?options=-c")
        (None, 'postgresql://db/app?options=-c')
    """
    label, eq, rest = text.partition("=")
    if not eq or ":" in label:
        return None, text
    if not _LABEL.match(label) or not rest:
        raise UnknownBackend(
            f"store selection {without_passwords(text)!r}: write LABEL=URL, the label of "
            "letters, digits and _ . + - (for example prod=adk+sqlite:///prod.db)"
        )
    return label, rest


def split_framework(text: str) -> tuple[str, str, URL | None] | None:
    """Split a ``FRAMEWORK+BACKEND[://…]`` store selection; ``None`` when `text` is not one.

    Returns:
        The framework and backend (lower case) and the location without
        ``FRAMEWORK+`` (``sqlite:///tmp/a.db``), parsed; ``None`` for the location when
        the selection names none (``adk+sqlite``, ``adk+memory://``).

    Raises:
        UnknownBackend: Nothing follows the colon (``adk+sqlite:``), or the location
            is malformed.

    Examples:
        >>> framework, backend, where = split_framework("adk+sqlite:///tmp/a.db")
        >>> framework, backend, where.local_path()
        ('adk', 'sqlite', '/tmp/a.db')
        >>> split_framework("adk+memory")
        ('adk', 'memory', None)
    """
    match = _FRAMEWORK.match(text)
    if match is None:
        return None
    framework = match["framework"].lower()
    backend = match["backend"].lower()
    rest = text[match.end() :]
    if rest and not rest.startswith(":"):
        return None
    if rest == ":":
        raise UnknownBackend(
            f"store {redact_url(text)!r}: nothing follows the colon; give a location "
            f"({framework}+{backend}://…) or none ({framework}+{backend})"
        )
    if not rest or rest == "://":
        return framework, backend, None
    return framework, backend, parse_url(f"{backend}{rest}")
