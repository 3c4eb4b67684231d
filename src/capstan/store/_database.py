"""One database handle under every part of the store: its SQLAlchemy connection pools, dialect, write transactions.

:class:`Database` is what the history, the restart records, the outbox, the retention and the keys share: the
writer's and the readers' SQLAlchemy engines (``write_sql_engine``, ``read_sql_engine``: one pool each, so SQLite readers never wait for the writer's lock), one process-wide write
lock (SQLite has one writer; PostgreSQL's partition creation wants one too), the clock, and PostgreSQL's cache of
day partitions. :meth:`Database.writing` is the one serialized write transaction; a database error in it becomes
:class:`StoreWriteError` after the rollback.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import Connection, Engine, MetaData, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from capstan.store import _schema as s
from capstan.store._connection import (
    StoreConnectError,
    check_connect,
    create_sql_engines,
    current_revision,
    describe_db_error,
    migrate,
    parse_database_url,
    require_existing_file,
    require_schema,
    safe_url,
)
from capstan.store._partitions import PartitionCache

Clock = Callable[[], float]


class StoreWriteError(RuntimeError):
    """A write failed and was rolled back (disk full, read-only, database gone): stop writing, say so loudly."""


def open_database(
    location: str,
    *,
    clock: Clock = time.time,
    run_migrations: bool = True,
    writer_cache_kib: int | None = None,
    create: bool = True,
) -> Database:
    """Open (and by default migrate) the database at a file path or URL; see :func:`capstan.store.open_store`."""
    url = parse_database_url(location)
    if not create:
        require_existing_file(url)
    write, read = create_sql_engines(url, writer_cache_kib=writer_cache_kib)
    try:
        check_connect(write, url)
        if not create:
            require_schema(read, url)
        if run_migrations:
            try:
                migrate(write)
            except (OperationalError, DBAPIError) as exc:
                raise StoreConnectError(url, exc, "while migrating") from None
    except BaseException:
        # a caller that tries again (capstan.startup) must not leave a pool behind per attempt
        write.dispose()
        if read is not write:
            read.dispose()
        raise
    return Database(url, write, read, clock=clock)


class Database:
    """The SQLAlchemy engines, dialect, clock and write lock of one store database (see the module docstring)."""

    def __init__(
        self, url: URL, write_sql_engine: Engine, read_sql_engine: Engine, *, clock: Clock = time.time
    ) -> None:
        self.url = url
        self.write_sql_engine = write_sql_engine
        self.read_sql_engine = read_sql_engine
        self.clock = clock
        self.dialect = url.get_backend_name()
        self.write_lock = threading.Lock()
        # PostgreSQL's big tables are partitioned by day (capstan/store/_partitions.py); SQLite's are not
        self.partitions = PartitionCache(write_sql_engine) if self.dialect == "postgresql" else None

    @property
    def display_url(self) -> str:
        """The URL without its password, for messages."""
        return safe_url(self.url)

    @property
    def metadata(self) -> MetaData:
        """The schema's tables as this dialect has them (PostgreSQL adds the partition key tables)."""
        return s.postgres_metadata if self.dialect == "postgresql" else s.metadata

    def close(self) -> None:
        self.write_sql_engine.dispose()
        if self.read_sql_engine is not self.write_sql_engine:
            self.read_sql_engine.dispose()

    def ping(self) -> str | None:
        """None when the database answers a trivial query; otherwise the one line of what failed (the URL
        without its password), for a readiness probe."""
        try:
            with self.read_sql_engine.connect() as conn:
                conn.execute(select(1))
        except (OperationalError, DBAPIError) as exc:
            return describe_db_error(self.url, exc)
        return None

    def schema_revision(self) -> str | None:
        return current_revision(self.read_sql_engine)

    def count(self, table: str) -> int:
        """Rows in one table of the schema."""
        tbl = s.metadata.tables[table]
        with self.read_sql_engine.begin() as conn:
            return int(conn.execute(select(func.count()).select_from(tbl)).scalar_one())

    def dump_all_text(self) -> Iterable[str]:
        """Every cell of every table as text (for tests that prove a value is stored nowhere)."""
        with self.read_sql_engine.begin() as conn:
            for tbl in self.metadata.sorted_tables:
                for row in conn.execute(select(tbl)):
                    for value in row:
                        yield str(value)

    def insert(self, table: Any) -> Any:
        """This dialect's INSERT (both have ON CONFLICT)."""
        if self.dialect == "postgresql":
            return postgresql.insert(table)
        return sqlite.insert(table)

    def write_error(self, exc: BaseException, doing: str = "write rolled back") -> StoreWriteError:
        """The one line a failed write raises (the URL without its password, what failed, what happened)."""
        return StoreWriteError(describe_db_error(self.url, exc) + f" ({doing})")

    def writing(self) -> WriteTransaction:
        """One serialized write transaction (``with db.writing() as conn:``); database errors become
        :class:`StoreWriteError` after the rollback (an IntegrityError is raised as it is)."""
        return WriteTransaction(self)


class WriteTransaction:
    """Context manager: one serialized write transaction whose database errors become StoreWriteError."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._cm: Any = None

    def __enter__(self) -> Connection:
        self._db.write_lock.acquire()
        try:
            self._cm = self._db.write_sql_engine.begin()
            conn: Connection = self._cm.__enter__()
        except (OperationalError, DBAPIError) as exc:
            self._db.write_lock.release()
            raise StoreWriteError(describe_db_error(self._db.url, exc)) from exc
        except BaseException:
            self._db.write_lock.release()
            raise
        return conn

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        try:
            self._cm.__exit__(et, ev, tb)
        except (OperationalError, DBAPIError) as exc:
            if not isinstance(exc, IntegrityError):
                raise self._db.write_error(exc) from exc
            raise
        finally:
            self._db.write_lock.release()
        if isinstance(ev, (OperationalError, DBAPIError)) and not isinstance(ev, IntegrityError):
            raise self._db.write_error(ev) from ev
