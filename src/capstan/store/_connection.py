"""Connecting to a database from a user-supplied location: URL checks, the SQLAlchemy engines (connection pools)
with their SQLite pragmas, and the schema's revision check and migrations.

A plain path (or ``sqlite:///PATH``) gives the embedded SQLite store in WAL mode; ``postgresql://`` gives
PostgreSQL through psycopg 3. Anything else is one :class:`~capstan.errors.UserError` line naming the URL.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any, Final

from sqlalchemy import (
    Column,
    Engine,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    create_engine,
    event,
    inspect,
    text,
)
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError

from capstan.backoff import backoff_delay
from capstan.errors import UserError

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# the newest migration's revision id; a test checks it against Alembic's head, so opening an up-to-date store
# never imports Alembic (it costs ~10 MB of memory in every long-running process)
HEAD_REVISION = "0004"
SQLITE_BUSY_TIMEOUT_MS = 10_000
INGEST_CACHE_KIB = 32_768  # the recorder's writer page cache
CONNECT_TIMEOUT_S = 10


def parse_database_url(location: str) -> URL:
    """Turn a path or URL into a SQLAlchemy URL for SQLite or PostgreSQL (psycopg 3), or raise one clear line."""
    text = location.strip()
    if not text:
        raise UserError("database URL: empty (give a file path, sqlite:///PATH or postgresql://USER@HOST/DB)")
    if "://" not in text:
        return URL.create("sqlite", database=str(Path(text).expanduser().resolve()))
    try:
        url = make_url(text)
        url.port  # noqa: B018 - SQLAlchemy parses the port lazily: a bad one must fail here, not at connect
    except (ArgumentError, ValueError):
        raise UserError(f"database URL {_hide_password(text)!r}: not a valid URL") from None
    backend = url.get_backend_name()
    if backend == "sqlite":
        if not url.database or url.database == ":memory:":
            raise UserError(f"database URL {text!r}: SQLite needs a file path (sqlite:///PATH)")
        return url.set(drivername="sqlite")
    if backend in ("postgresql", "postgres"):
        if url.get_driver_name() not in ("psycopg", "postgresql", "postgres", ""):
            raise UserError(
                f"database URL {text!r}: only the psycopg driver is supported (postgresql+psycopg://)"
            )
        if not url.database:
            raise UserError(f"database URL {safe_url(url)!r}: no database name")
        return url.set(drivername="postgresql+psycopg")
    raise UserError(
        f"database URL {safe_url(url)!r}: unsupported scheme {url.drivername!r}"
        " (use a file path, sqlite:///PATH or postgresql://USER@HOST/DB)"
    )


def _hide_password(text: str) -> str:
    """``scheme://user:***@host…`` for a URL SQLAlchemy could not parse (so :func:`safe_url` cannot hide it)."""
    scheme, sep, rest = text.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return text
    return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}"


STORE_WRITERS = "`capstan record`, `capstan restarts run` or `capstan history migrate`"


def require_existing_file(url: URL) -> None:
    """For a reader: a SQLite store must already exist (connecting would create an empty file)."""
    if url.get_backend_name() != "sqlite":
        return
    db = Path(url.database or "")
    if not db.exists():
        raise UserError(f"history store {str(db)!r}: no such file (a store is created by {STORE_WRITERS})")
    if not db.is_file():
        raise UserError(f"history store {str(db)!r}: not a file")


def require_schema(sql_engine: Engine, url: URL) -> None:
    """For a reader: the database must hold a store (an empty database would be given the tables)."""
    try:
        revision = current_revision(sql_engine)
    except (OperationalError, DBAPIError) as exc:
        raise StoreConnectError(url, exc) from None
    if revision is None:
        raise UserError(
            f"history store {safe_url(url)!r}: holds no Capstan store (one is created by {STORE_WRITERS})"
        )


def safe_url(url: URL) -> str:
    """The URL with its password hidden, for messages."""
    return url.render_as_string(hide_password=True)


def _set_wal(cur: Any) -> None:
    """Switch the database to WAL (a no-op once it is). NOTE: a database still in rollback-journal mode whose
    write lock another connection holds (a second recorder creating the store at the same moment) answers "database
    is locked" at once, without the busy handler; the switch is retried with backoff, within the busy timeout,
    instead of failing the start (seen: two shard recorders started together on a fresh SQLite file)."""
    import sqlite3

    waited_s = 0.0
    for attempt in itertools.count(1):  # bounded: gives up once the busy timeout is spent
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if (
                "locked" not in str(exc) and "busy" not in str(exc)
            ) or waited_s >= SQLITE_BUSY_TIMEOUT_MS / 1000:
                raise
        delay_s = backoff_delay(attempt, base=0.01, cap=0.5)
        time.sleep(delay_s)
        waited_s += delay_s


def _sqlite_pragmas(sql_engine: Engine, *, immediate: bool, cache_kib: int | None = None) -> None:
    @event.listens_for(sql_engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        _set_wal(cur)
        cur.execute("PRAGMA synchronous=NORMAL")
        if cache_kib:
            cur.execute(f"PRAGMA cache_size=-{int(cache_kib)}")
        cur.close()

    @event.listens_for(sql_engine, "begin")
    def _on_begin(conn: Any) -> None:
        # NOTE: writers take the write lock at BEGIN so a deferred read->write upgrade can never fail with
        # SQLITE_BUSY_SNAPSHOT in WAL mode; readers use plain BEGIN and never block the writer.
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def create_sql_engines(url: URL, *, writer_cache_kib: int | None = None) -> tuple[Engine, Engine]:
    """(writer's SQLAlchemy engine, readers' SQLAlchemy engine): the same object on PostgreSQL. ``writer_cache_kib`` sizes the SQLite
    writer's page cache (SQLite's default, 2 MiB, when None): a recorder ingesting into a large store keeps its hot
    index pages there; a restart watcher writing little keeps the default and its memory."""
    if url.get_backend_name() == "sqlite":
        db = Path(url.database or "")
        if not db.parent.is_dir():
            raise UserError(f"database {str(db)!r}: directory {str(db.parent)!r} does not exist")
        # One pooled connection for the writer (writes are serialized anyway), a small pool for readers.
        write = create_engine(url, pool_size=1, max_overflow=0, pool_timeout=60)
        read = create_engine(url, pool_size=4, max_overflow=4, pool_timeout=60)
        _sqlite_pragmas(write, immediate=True, cache_kib=writer_cache_kib)
        _sqlite_pragmas(read, immediate=False)
        return write, read
    sql_engine = create_engine(
        url,
        pool_pre_ping=True,
        pool_size=5,
        max_overflow=5,
        pool_timeout=30,
        connect_args={"connect_timeout": CONNECT_TIMEOUT_S},
    )
    return sql_engine, sql_engine


def migrate(sql_engine: Engine) -> None:
    """Bring the schema to the newest revision (idempotent; Alembic is imported only when there is work).

    A fresh database gets the tables from the schema metadata and Alembic's version row directly — exactly what
    running every revision from nothing produces (a unit test compares the two) — so no process that starts on an
    empty store loads Alembic either."""
    revision = current_revision(sql_engine)
    if revision == HEAD_REVISION:
        return
    if revision is None and _create_fresh(sql_engine):
        return
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    with sql_engine.begin() as conn:
        _lock_schema(
            conn
        )  # another process upgrading at the same moment finishes first; this one then finds head
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


# pg_advisory_xact_lock's key: any constant other Capstan tables' users are unlikely to pick ("capstan" in ASCII)
_SCHEMA_LOCK_KEY: Final = 0x63617073_74616E


def _lock_schema(conn: Connection) -> None:
    """On PostgreSQL, hold the schema lock until the transaction ends: several recorders (shards of one store)
    starting at once on an empty database create its tables once. (SQLite's writer begins IMMEDIATE already.)"""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK_KEY})


def _create_fresh(sql_engine: Engine) -> bool:
    """Create every table and stamp the head revision if the database holds none of Capstan's tables; False if it
    holds some (then Alembic decides)."""
    from capstan.store._schema import TABLES, metadata, postgres_metadata

    version = Table(
        "alembic_version",
        MetaData(),
        Column("version_num", String(32), nullable=False),
        PrimaryKeyConstraint("version_num", name="alembic_version_pkc"),
    )
    with (
        sql_engine.begin() as conn
    ):  # the SQLite writer begins IMMEDIATE: two processes creating at once serialize
        _lock_schema(conn)
        inspector = inspect(conn)
        if inspector.has_table("alembic_version"):
            return True  # another process created it meanwhile
        if any(inspector.has_table(t.name) for t in TABLES):
            return False
        if conn.dialect.name == "postgresql":
            postgres_metadata.create_all(conn)
        else:
            metadata.create_all(conn, tables=list(TABLES))
        version.create(conn)
        conn.execute(version.insert().values(version_num=HEAD_REVISION))
    return True


def current_revision(sql_engine: Engine) -> str | None:
    """The revision in Alembic's ``alembic_version`` table (None for an empty database)."""
    with sql_engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        rows = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
        return str(rows[0]) if len(rows) == 1 else None


def _driver_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    return str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__


def describe_db_error(url: URL, exc: BaseException) -> str:
    """One line for a database failure: the URL (no password) and the driver's first line."""
    return f"database {safe_url(url)!r}: {_driver_line(exc)}"


class StoreConnectError(UserError):
    """The database could not be reached or refused this process (one line, like every :class:`UserError`).

    ``driver_message`` is the driver's own first line, from which :mod:`capstan.startup` tells a server that is not
    there yet (a long-running component waits for it) from a configuration waiting cannot fix (a one-shot command
    stops on either)."""

    def __init__(self, url: URL, exc: BaseException, doing: str = "") -> None:
        super().__init__(describe_db_error(url, exc) + (f" ({doing})" if doing else ""))
        self.driver_message = _driver_line(exc)


def check_connect(sql_engine: Engine, url: URL) -> None:
    """Open and close one connection, turning any failure into a one-line :class:`StoreConnectError`."""
    try:
        with sql_engine.connect():
            pass
    except (OperationalError, DBAPIError) as exc:
        raise StoreConnectError(url, exc) from None
