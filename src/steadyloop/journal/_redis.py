r"""The Redis backend: every batch is one server-side Lua script, atomic by construction.

URL: ``redis://[[USER]:PASSWORD@]HOST[:PORT]/DB[?prefix=P&wait_aof=1&…]`` (``rediss://``
for TLS). ``prefix`` starts every key (``steadyloop:`` by default), so several journals
share one database; two journals' prefixes must not be prefixes of each other. Every
other query parameter goes to redis-py (``client_name``, ``socket_timeout``, …).

Durability — read this before trusting Redis with a journal. A returned ``append`` is
in the server's memory; what it survives is exactly what the server's persistence
settings make it survive:

* **No persistence** (``save ""`` and ``appendonly no``, as on a cache, or this
  project's CI): a returned append survives **no restart** of Redis at all. A crash,
  a restart or a failover loses everything.
* **RDB snapshots only** (``save`` rules): everything written since the last snapshot
  is lost when Redis dies — typically minutes of acknowledged batches.
* **AOF with** ``appendfsync everysec`` (the usual AOF setting): up to about one second
  of acknowledged batches is lost when the machine loses power or the kernel crashes;
  a kill of the Redis process alone loses nothing already written to the AOF file.
* **AOF with** ``appendfsync always``: the server syncs the AOF before it replies, so a
  returned append survives a kill of the Redis process and power loss.
* ``wait_aof=1`` in the URL (Redis 7.2 or newer, with ``appendonly yes``): after each
  batch the backend runs ``WAITAOF 1 0``, so ``append`` returns only once the local AOF
  holds the batch on disk, whatever ``appendfsync`` says. Opening such a URL on a
  server without AOF fails with [`BackendUnavailable`][steadyloop.BackendUnavailable].

`RedisJournal.server_settings` shows what the server reported at open.

Atomicity: one ``EVALSHA`` (with a fallback to loading the script when the server has
forgotten it) checks the idempotency key, checks every ``expected_next``, checks that
no key has a foreign type, and only then writes — records, stream set, namespace set,
key — so Redis, which runs a script to the end before serving anyone else, never shows
or keeps half a batch. If the connection is lost the caller gets
[`BackendUnavailable`][steadyloop.BackendUnavailable] without knowing whether the script ran; the
client never resends a command on its own, and resubmitting with the same idempotency
key is safe. Standalone Redis (or a primary with replicas) only: the namespace set is
shared by all namespaces, so Redis Cluster is not supported.

Key layout (names are percent-encoded, ``%``, ``:``, ``{``, ``}``, ``*``, ``?``, ``[``,
``]`` and ``\`` becoming ``%XX``, so any name maps to exactly one key)::

    {prefix}schema                     string: the layout version, "1"
    {prefix}N                          set: namespaces holding a stream
    {prefix}S:{namespace}              set: the namespace's non-empty streams
    {prefix}K:{namespace}              hash: idempotency key -> "digest first,first,…"
    {prefix}R:{namespace}:{stream}     list: canonical JSON records; seq = index + 1
"""

from __future__ import annotations

import logging
from typing import Any

from steadyloop._errors import (
    BackendUnavailable,
    ConflictError,
    CorruptionError,
    IdempotencyKeyReused,
    StoreNotFound,
    UnknownBackend,
)
from steadyloop._seal import damaged_snapshot
from steadyloop._urls import URL, as_url, bad_url
from steadyloop.journal._protocol import AppendResult, Journal, PreparedBatch, StoredKey
from steadyloop.records import Record, StoredRecord, canonical_json, decode

_log = logging.getLogger(__name__)

try:
    import redis.asyncio as aioredis
    from redis import exceptions as redis_errors
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
except ImportError as exc:  # pragma: no cover - depends on the install
    raise BackendUnavailable("the Redis driver is missing; install steadyloop[redis]") from exc

try:  # redis-py 6.4+: with maintenance notifications on, the pool does not notice that
    # an idle connection was closed by the server, and hands it out to fail once.
    from redis.maint_notifications import MaintNotificationsConfig

    _POOL_OPTIONS: dict[str, Any] = {
        "maint_notifications_config": MaintNotificationsConfig(enabled=False)
    }
except ImportError:  # pragma: no cover - older redis-py checks idle connections anyway
    _POOL_OPTIONS = {}

__all__ = ["LAYOUT_VERSION", "RedisJournal", "encode_name"]

LAYOUT_VERSION = 1
"""The key layout version this code writes and reads."""

_OWN_OPTIONS = ("prefix", "wait_aof", "wait_aof_timeout")
_SPECIAL = frozenset("%:{}*?[]\\")


def encode_name(name: str) -> str:
    """Percent-encode the characters that structure keys, so names map to keys injectively."""
    return "".join(f"%{ord(c):02X}" if c in _SPECIAL else c for c in name)


# The same encoding in Lua. The special characters are ASCII, and no byte of a
# multi-byte UTF-8 sequence is ASCII, so encoding bytes equals encoding characters.
_LUA_ENCODE = r"""
local function enc(name)
  return (string.gsub(name, '[%%:{}%*%?%[%]\\]', function(c)
    return string.format('%%%02X', string.byte(c))
  end))
end
"""

_APPEND_LUA = r"""
-- KEYS[1] namespaces set, KEYS[2] streams set, KEYS[3] keys hash, KEYS[3+i] records of
-- stream i. ARGV[1] namespace, ARGV[2] idempotency key ('' for none), ARGV[3] digest,
-- ARGV[4] n; then n triples (stream, expected_next or '', record count); then records.
local n = tonumber(ARGV[4])
local key = ARGV[2]
if key ~= '' then
  local found = redis.call('HGET', KEYS[3], key)
  if found then return {'dup', found} end
end
local want = {[1] = 'set', [2] = 'set', [3] = 'hash'}
for i = 1, 3 do
  local t = redis.call('TYPE', KEYS[i])['ok']
  if t ~= 'none' and t ~= want[i] then return {'corrupt', KEYS[i], t} end
end
local heads = {}
for i = 1, n do
  local k = KEYS[3 + i]
  local t = redis.call('TYPE', k)['ok']
  if t ~= 'none' and t ~= 'list' then return {'corrupt', k, t} end
  local head = redis.call('LLEN', k)
  local expected = ARGV[4 + 3 * (i - 1) + 2]
  if expected ~= '' and tonumber(expected) ~= head + 1 then
    return {'conflict', tostring(i), string.format('%d', head + 1)}
  end
  heads[i] = head
end
-- Every check passed: from here on, only writes.
local r = 5 + 3 * n
local firsts = {}
for i = 1, n do
  local base = 4 + 3 * (i - 1)
  local count = tonumber(ARGV[base + 3])
  local k = KEYS[3 + i]
  local done = 0
  while done < count do
    local m = math.min(count - done, 1000)
    redis.call('RPUSH', k, unpack(ARGV, r + done, r + done + m - 1))
    done = done + m
  end
  r = r + count
  redis.call('SADD', KEYS[2], ARGV[base + 1])
  firsts[i] = string.format('%d', heads[i] + 1)
end
redis.call('SADD', KEYS[1], ARGV[1])
local positions = table.concat(firsts, ',')
if key ~= '' then redis.call('HSET', KEYS[3], key, ARGV[3] .. ' ' .. positions) end
return {'ok', positions}
"""

_DELETE_STREAM_LUA = r"""
-- KEYS[1] namespaces set, KEYS[2] streams set, KEYS[3] records; ARGV namespace, stream.
redis.call('DEL', KEYS[3])
redis.call('SREM', KEYS[2], ARGV[2])
if redis.call('SCARD', KEYS[2]) == 0 then redis.call('SREM', KEYS[1], ARGV[1]) end
return 1
"""

_DELETE_NAMESPACE_LUA = (
    _LUA_ENCODE
    + r"""
-- KEYS[1] namespaces set, KEYS[2] streams set, KEYS[3] keys hash; ARGV[1] namespace,
-- ARGV[2] the prefix of record keys of this namespace ({prefix}R:{namespace}:).
local streams = redis.call('SMEMBERS', KEYS[2])
local batch = {}
for _, s in ipairs(streams) do
  batch[#batch + 1] = ARGV[2] .. enc(s)
  if #batch == 1000 then redis.call('DEL', unpack(batch)); batch = {} end
end
if #batch > 0 then redis.call('DEL', unpack(batch)) end
redis.call('DEL', KEYS[2], KEYS[3])
redis.call('SREM', KEYS[1], ARGV[1])
return #streams
"""
)


def _split_url(url: URL) -> tuple[str, dict[str, str]]:
    """Split a journal URL into redis-py's URL and Steadyloop's own options."""
    if url.family not in ("redis", "unix") or url.driver or url.qualifiers:
        raise bad_url(url, "not a redis:// URL")
    rest, own = url.split_options(_OWN_OPTIONS)
    return rest.build(query=rest.query_items), own


class RedisJournal(Journal):
    """A journal in a Redis database, each batch written by one atomic Lua script.

    Durability: only what the server's persistence keeps — a Redis without RDB or AOF
    (``save ""``, ``appendonly no``) survives **no restart**; with ``appendonly yes``
    and ``appendfsync always`` (or ``wait_aof=1``) a returned append survives a kill of
    Redis and power loss. See the module documentation for every setting.

    Args:
        url: A ``redis://`` URL (its ``prefix``, ``wait_aof`` and ``wait_aof_timeout``
            query parameters are read here; keyword arguments override them).
        prefix: Start of every key; ``steadyloop:``.
        wait_aof: Return from ``append`` only once the batch is fsynced to the local
            AOF (``WAITAOF 1 0``; Redis 7.2+ with ``appendonly yes``).
        wait_aof_timeout: Milliseconds to wait for that fsync before raising
            [`BackendUnavailable`][steadyloop.BackendUnavailable] (the batch is then written but not
            known to be on disk).
        connect_timeout: Seconds to wait for the server when connecting.
        create: Whether a missing journal is started (its layout key written); with
            ``False`` a prefix holding no journal raises
            [`StoreNotFound`][steadyloop.StoreNotFound] ("no journal here") and writes
            nothing (for tools that only inspect).
    """

    def __init__(
        self,
        url: str | URL,
        *,
        prefix: str | None = None,
        wait_aof: bool | None = None,
        wait_aof_timeout: int | None = None,
        connect_timeout: float = 10.0,
        create: bool = True,
    ) -> None:
        super().__init__()
        self.create = create
        parsed = as_url(url)
        self._client_url, own = _split_url(parsed)
        self.url = parsed.redacted
        self._location = parsed.where
        self.prefix = prefix if prefix is not None else own.get("prefix", "steadyloop:")
        if not self.prefix or any(ord(c) < 32 for c in self.prefix):
            raise UnknownBackend(f"{self.url}: the key prefix must be non-empty printable text")
        flag = own.get("wait_aof", "0") if wait_aof is None else ("1" if wait_aof else "0")
        if flag not in ("0", "1", "true", "false", "yes", "no"):
            raise UnknownBackend(f"{self.url}: wait_aof must be 0 or 1, got {flag!r}")
        self.wait_aof = flag in ("1", "true", "yes")
        try:
            self.wait_aof_timeout = int(
                wait_aof_timeout
                if wait_aof_timeout is not None
                else own.get("wait_aof_timeout", 5000)
            )
        except ValueError as exc:
            raise UnknownBackend(f"{self.url}: bad wait_aof_timeout: {exc}") from None
        self._connect_timeout = connect_timeout
        self._client: Any = None
        self._append_script: Any = None
        self._delete_stream_script: Any = None
        self._delete_namespace_script: Any = None
        self.server_settings: dict[str, str] = {}
        """The server's version and persistence settings (``appendonly``, ``appendfsync``,
        ``save``), read at open; empty values when the server hides ``CONFIG``."""

    # -- keys -------------------------------------------------------------------------

    def _key_namespaces(self) -> str:
        return f"{self.prefix}N"

    def _key_streams(self, namespace: str) -> str:
        return f"{self.prefix}S:{encode_name(namespace)}"

    def _key_idempotency(self, namespace: str) -> str:
        return f"{self.prefix}K:{encode_name(namespace)}"

    def _key_records(self, namespace: str, stream: str) -> str:
        return f"{self.prefix}R:{encode_name(namespace)}:{encode_name(stream)}"

    def _where(self, key: str, index: int | None = None) -> str:
        at = "" if index is None else f" index {index}"
        return f"redis {self._location} key {key!r}{at}"

    # -- opening ------------------------------------------------------------------------

    @classmethod
    async def open(cls, url: str | URL, **options: Any) -> RedisJournal:
        """Connect, check the key layout version, and return the journal.

        Raises:
            BackendUnavailable: The server cannot be reached, or ``wait_aof`` was asked
                of a server without AOF.
            CorruptionError: The keys were written by a newer Steadyloop.
        """
        journal = cls(url, **options)
        try:
            await journal._connect()
        except BaseException:
            await journal._close()
            raise
        return journal

    async def _connect(self) -> None:
        self._client = aioredis.Redis.from_url(
            self._client_url,
            # Never resend a command on a lost connection: a script that ran but whose
            # reply was lost would run twice. The caller decides, with its key.
            retry=Retry(NoBackoff(), 0),
            socket_connect_timeout=self._connect_timeout,
            decode_responses=False,
            **_POOL_OPTIONS,
        )
        client = self._client
        self._append_script = client.register_script(_APPEND_LUA)
        self._delete_stream_script = client.register_script(_DELETE_STREAM_LUA)
        self._delete_namespace_script = client.register_script(_DELETE_NAMESPACE_LUA)
        try:
            if self.create:
                await client.set(f"{self.prefix}schema", str(LAYOUT_VERSION), nx=True)
            raw = await client.get(f"{self.prefix}schema")
            if raw is None and not self.create:
                raise StoreNotFound(
                    f"{self.url}: no journal here: key {self.prefix}schema does not exist "
                    "(check the URL and its prefix); nothing was created"
                )
        except redis_errors.RedisError as exc:
            raise BackendUnavailable(f"{self.url}: cannot connect: {_describe(exc)}") from exc
        try:
            version = int(raw)
        except (TypeError, ValueError):
            raise CorruptionError(
                f"layout version {raw!r} is not a number", location=self._where("schema")
            ) from None
        if version > LAYOUT_VERSION:
            raise CorruptionError(
                f"layout version {version} is newer than this steadyloop ({LAYOUT_VERSION}); "
                "upgrade steadyloop",
                location=self._where(f"{self.prefix}schema"),
            )
        await self._read_settings()
        if self.wait_aof and self.server_settings.get("appendonly") != "yes":
            raise BackendUnavailable(
                f"{self.url}: wait_aof=1 needs a server with appendonly yes (and Redis 7.2+); "
                f"this server has appendonly={self.server_settings.get('appendonly') or '?'}"
            )

    async def _read_settings(self) -> None:
        client = self._client
        settings: dict[str, str] = {}
        try:
            info = await client.info("server")
            settings["redis_version"] = str(info.get("redis_version", ""))
        except redis_errors.RedisError as exc:
            raise BackendUnavailable(f"{self.url}: {_describe(exc)}") from exc
        for name in ("appendonly", "appendfsync", "save"):
            try:
                got = await client.config_get(name)
            except redis_errors.ResponseError as exc:
                _log.info(
                    "%s: CONFIG GET %s refused (%s); its setting is unknown", self.url, name, exc
                )
                got = {}  # CONFIG renamed or forbidden (managed Redis)
            except redis_errors.RedisError as exc:
                raise BackendUnavailable(f"{self.url}: {_describe(exc)}") from exc
            value = got.get(name.encode(), got.get(name, b""))
            settings[name] = value.decode() if isinstance(value, bytes) else str(value)
        self.server_settings = settings

    # -- calls ------------------------------------------------------------------------

    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Await a client call, turning driver errors into the journal's errors."""
        try:
            return await fn(*args, **kwargs)
        except redis_errors.ResponseError as exc:
            if str(exc).startswith("WRONGTYPE"):
                keys = [_key_text(a) for a in args if _key_text(a).startswith(self.prefix)]
                raise CorruptionError(
                    f"a key holds a value of the wrong type: {exc}",
                    location=self._where(keys[0] if len(keys) == 1 else " or ".join(keys) or "?"),
                ) from exc
            raise BackendUnavailable(f"{self.url}: {_describe(exc)}") from exc
        except redis_errors.RedisError as exc:
            raise BackendUnavailable(f"{self.url}: {_describe(exc)}") from exc
        except OSError as exc:
            raise BackendUnavailable(f"{self.url}: {_describe(exc)}") from exc

    # -- backend hooks ----------------------------------------------------------------

    async def _append(self, batch: PreparedBatch) -> AppendResult:
        ns = batch.namespace
        keys = [self._key_namespaces(), self._key_streams(ns), self._key_idempotency(ns)]
        keys.extend(self._key_records(ns, w.stream) for w in batch.writes)
        args: list[str | int] = [ns, batch.idempotency_key or "", batch.digest, len(batch.writes)]
        for w, texts in zip(batch.writes, batch.encoded, strict=True):
            expected = "" if w.expected_next is None else str(w.expected_next)
            args.extend((w.stream, expected, len(texts)))
        for texts in batch.encoded:
            args.extend(texts)
        reply = await self._call(self._append_script, keys=keys, args=args)
        status = reply[0].decode()
        if status == "dup":
            assert batch.idempotency_key is not None
            return self._duplicate(batch, reply[1].decode(), keys[2])
        if status == "conflict":
            w = batch.writes[int(reply[1]) - 1]
            assert w.expected_next is not None
            raise ConflictError(ns, w.stream, w.expected_next, int(reply[2]))
        if status == "corrupt":
            raise CorruptionError(
                f"key holds a {reply[2].decode()}, not a journal structure",
                location=self._where(reply[1].decode("utf-8", "replace")),
            )
        firsts = [int(x) for x in reply[1].decode().split(",")]
        result = AppendResult(namespace=ns, positions=_positions(batch, firsts))
        if self.wait_aof:
            await self._wait_aof()
        return result

    def _duplicate(self, batch: PreparedBatch, stored: str, key: str) -> AppendResult:
        assert batch.idempotency_key is not None
        digest, _, positions = stored.partition(" ")
        if digest != batch.digest:
            raise IdempotencyKeyReused(batch.namespace, batch.idempotency_key)
        if positions.startswith("="):  # a key restored by a copy: streams named
            named = _named_positions(positions, self._where(key))
            return AppendResult(namespace=batch.namespace, positions=named, duplicate=True)
        try:
            firsts = [int(x) for x in positions.split(",")]
            if len(firsts) != len(batch.writes):
                raise ValueError(f"{len(firsts)} positions for {len(batch.writes)} streams")
        except ValueError as exc:
            raise CorruptionError(
                f"idempotency entry {batch.idempotency_key!r} is damaged: {exc}",
                location=self._where(key),
            ) from None
        return AppendResult(
            namespace=batch.namespace, positions=_positions(batch, firsts), duplicate=True
        )

    async def _wait_aof(self) -> None:
        got = await self._call(self._client.execute_command, "WAITAOF", 1, 0, self.wait_aof_timeout)
        if not got or int(got[0]) < 1:
            raise BackendUnavailable(
                f"{self.url}: the batch was written but not confirmed on disk within "
                f"{self.wait_aof_timeout} ms (WAITAOF); resubmit it with its idempotency key"
            )

    async def _read(
        self, namespace: str, stream: str, start: int, limit: int | None
    ) -> list[StoredRecord]:
        key = self._key_records(namespace, stream)
        stop = -1 if limit is None else start - 1 + limit - 1
        raw = await self._call(self._client.lrange, key, start - 1, stop)
        out: list[StoredRecord] = []
        for offset, data in enumerate(raw):
            seq = start + offset
            try:
                record = Record.from_json(data)
            except (ValueError, TypeError) as exc:
                # A snapshot that no longer parses is passed over (steadyloop._seal).
                text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
                stand_in = damaged_snapshot(text, str(exc)) if isinstance(text, str) else None
                if stand_in is not None:
                    out.append(StoredRecord(stream=stream, seq=seq, record=stand_in))
                    continue
                raise CorruptionError(
                    f"stored record does not decode: {exc}", location=self._where(key, seq - 1)
                ) from None
            out.append(StoredRecord(stream=stream, seq=seq, record=record))
        return out

    async def _head(self, namespace: str, stream: str) -> int:
        head: int = await self._call(self._client.llen, self._key_records(namespace, stream))
        return head

    async def _streams(self, namespace: str) -> list[str]:
        key = self._key_streams(namespace)
        members = await self._call(self._client.smembers, key)
        return [_text(m, self._where(key)) for m in members]

    async def _namespaces(self) -> list[str]:
        key = self._key_namespaces()
        members = await self._call(self._client.smembers, key)
        return [_text(m, self._where(key)) for m in members]

    async def _delete_stream(self, namespace: str, stream: str) -> None:
        keys = [
            self._key_namespaces(),
            self._key_streams(namespace),
            self._key_records(namespace, stream),
        ]
        await self._call(self._delete_stream_script, keys=keys, args=[namespace, stream])

    async def _delete_namespace(self, namespace: str) -> None:
        keys = [
            self._key_namespaces(),
            self._key_streams(namespace),
            self._key_idempotency(namespace),
        ]
        records_prefix = f"{self.prefix}R:{encode_name(namespace)}:"
        await self._call(self._delete_namespace_script, keys=keys, args=[namespace, records_prefix])

    async def _idempotency_keys(self, namespace: str) -> list[StoredKey]:
        where = self._key_idempotency(namespace)
        raw = await self._call(self._client.hgetall, where)
        out: list[StoredKey] = []
        for name, value in raw.items():
            key = _text(name, self._where(where))
            digest, _, positions = _text(value, self._where(where)).partition(" ")
            named = (
                _named_positions(positions, self._where(where))
                if positions.startswith("=")
                else None
            )
            out.append(StoredKey(key, digest, named))
        return out

    async def _restore_key(self, namespace: str, key: StoredKey) -> None:
        positions = {s: [a, b] for s, (a, b) in (key.positions or {}).items()}
        value = f"{key.digest} ={canonical_json(positions)}"
        await self._call(self._client.hsetnx, self._key_idempotency(namespace), key.key, value)
        if self.wait_aof:
            await self._wait_aof()

    async def _close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()


def _positions(batch: PreparedBatch, firsts: list[int]) -> dict[str, tuple[int, int]]:
    """Per stream of the batch, its first and last sequence number."""
    return {
        w.stream: (first, first + len(texts) - 1)
        for w, texts, first in zip(batch.writes, batch.encoded, firsts, strict=True)
    }


def _named_positions(text: str, where: str) -> dict[str, tuple[int, int]]:
    """Parse the ``={"stream": [first, last], ...}`` form a restored key keeps."""
    try:
        data = decode(text[1:])
        if not isinstance(data, dict):
            raise ValueError("not an object")
        return {str(s): (int(v[0]), int(v[1])) for s, v in data.items()}
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise CorruptionError(
            f"restored idempotency entry is damaged: {exc}", location=where
        ) from None


def _text(value: bytes, where: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptionError(f"a stored name is not UTF-8: {exc}", location=where) from None


def _describe(exc: BaseException) -> str:
    """A one-line description of a driver error."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _key_text(value: object) -> str:
    """A call argument as text, for naming the key of an error ("" if it is no key)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else ""
