"""The store's keys: the random key of the keyed hashes that stand for redacted values (:mod:`capstan.redact`)."""

from __future__ import annotations

import secrets

from sqlalchemy import select

from capstan.redact import RedactionPolicy, Redactor
from capstan.store import _schema as s
from capstan.store._database import Database
from capstan.store._models import to_us


class RedactionKeys:
    """The redaction key of one database, read once and kept."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._redaction_key: bytes | None = None

    def redaction_key(self, *, create: bool = True) -> bytes | None:
        """The random key of the keyed hashes that stand for redacted values (:mod:`capstan.redact`), created on
        first use by a writer (``create``; a reader gets None while no writer has made one). Every process on this
        store gets the same key, so a value redacted by the recorder yesterday and by the HTTP API today has the
        same marker; the key itself is never served."""
        if self._redaction_key is not None:
            return self._redaction_key
        t = s.store_keys
        with self._db.read_sql_engine.begin() as conn:
            row = conn.execute(select(t.c.value).where(t.c.name == "redaction")).first()
        if row is None and not create:
            return None
        if row is None:
            stmt = (
                self._db.insert(t)
                .values(name="redaction", value=secrets.token_hex(32), created_at=to_us(self._db.clock()))
                .on_conflict_do_nothing(index_elements=["name"])
            )
            with self._db.writing() as conn:
                conn.execute(stmt)
                # another process may have won the race: read what is stored, in the same transaction
                row = conn.execute(select(t.c.value).where(t.c.name == "redaction")).first()
        assert row is not None
        self._redaction_key = bytes.fromhex(row.value)
        return self._redaction_key

    def redactor(self, policy: RedactionPolicy | None = None, *, create_key: bool = True) -> Redactor:
        """A :class:`~capstan.redact.Redactor` keyed with :meth:`redaction_key` (readers pass
        ``create_key=False``: without a key yet, markers carry no hash)."""
        return Redactor(policy, key=self.redaction_key(create=create_key))
