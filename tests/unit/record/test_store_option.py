"""`capstan record --store` (or CAPSTAN_HISTORY_STORE, from a Secret in a pod) replaces the file's store."""

from __future__ import annotations

from pathlib import Path

import pytest

from capstan.errors import UserError
from capstan.record import load_recorder_config

pytestmark = pytest.mark.unit


def test_the_store_given_apart_replaces_the_file_s_or_stands_in_for_it(tmp_path: Path) -> None:
    with_store = tmp_path / "a.yaml"
    with_store.write_text("store: file.db\nsource: prod\n")
    assert load_recorder_config(with_store).store == "file.db"
    assert (
        load_recorder_config(with_store, store="postgresql+psycopg://u@h/db").store
        == "postgresql+psycopg://u@h/db"
    )
    without = tmp_path / "b.yaml"
    without.write_text("source: prod\n")
    assert load_recorder_config(without, store="given.db").source == "prod"
    with pytest.raises(UserError, match=r"b\.yaml.*store"):
        load_recorder_config(without)
