"""``infersight.cli.store_settings``, the store settings read without pydantic (#16) for the
commands that only read, answers what ``infersight.cli.settings.Settings`` answers: the same
defaults and the same environment variables, and pydantic's refusal of a bad value."""

from __future__ import annotations

import os

import pytest

from infersight.cli import group as cli
from infersight.cli import store_settings
from infersight.cli.settings import Settings
from infersight.config.parts import DEFAULT_DATABASE_URL, PREFIX, StorePart
from infersight.core.retention import RetentionPolicy


def test_the_light_store_settings_repeat_the_pydantic_ones() -> None:
    assert store_settings.DEFAULT_DATABASE_URL == DEFAULT_DATABASE_URL == cli.DEFAULT_STORE
    assert store_settings.PREFIX == PREFIX
    assert set(StorePart.model_fields) == {
        "database_url",
        *store_settings.OTHER_STORE_FIELDS,
        *store_settings.UNREAD_STORE_FIELDS,
    }
    # the declared defaults (no environment read): the light reader's are the same
    assert RetentionPolicy() == Settings.model_construct().retention()
    assert StorePart.model_construct().database_url == DEFAULT_DATABASE_URL


def test_the_light_store_settings_read_the_environment_as_pydantic_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in list(os.environ):
        if name.upper().startswith(PREFIX):
            monkeypatch.delenv(name)
    assert store_settings.read() == store_settings.StoreSettings(DEFAULT_DATABASE_URL)
    assert store_settings.read("sqlite:///given.db").database_url == "sqlite:///given.db"
    monkeypatch.setenv("infersight_database_url", "sqlite:///lower.db")  # any case, as pydantic
    assert store_settings.read().database_url == Settings().database_url == "sqlite:///lower.db"
    monkeypatch.setenv("INFERSIGHT_MINUTE_ROLLUP_RETENTION_DAYS", "3")
    read = store_settings.read()
    assert read.retention() == Settings().retention()
    assert read.retention().minute_days == 3
    monkeypatch.setenv("INFERSIGHT_MINUTE_ROLLUP_RETENTION_DAYS", "zero")
    with pytest.raises(ValueError, match="minute_rollup_retention_days"):  # pydantic's refusal
        store_settings.read()
