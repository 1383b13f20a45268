"""Every setting once: each ``INFERSIGHT_*`` variable is a field of exactly one part, a role
only composes parts, and each field is read from its documented variable."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from pydantic import SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from infersight.api.settings import ApiSettings
from infersight.cli.settings import Settings, SidecarSettings
from infersight.config.parts import PARTS, NotifierPart, Part, variable

ROLES: tuple[type[Part], ...] = (Settings, SidecarSettings, ApiSettings)
OURS = ("config", "api", "infersight", "service", "core")


def _declared(cls: type) -> set[str]:
    """The fields ``cls`` itself declares (its own annotations, not its bases')."""
    return set(vars(cls).get("__annotations__", {}))


def _settings_classes() -> set[type[BaseSettings]]:
    found: set[type[BaseSettings]] = set()
    todo: list[type[BaseSettings]] = [BaseSettings]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.add(sub)
                todo.append(sub)
    return {cls for cls in found if cls.__module__.partition(".")[0] in OURS}


def test_no_field_is_declared_in_two_parts() -> None:
    counts = Counter(name for part in PARTS for name in _declared(part))
    assert {name: n for name, n in counts.items() if n > 1} == {}
    assert _declared(Part) == set()


def test_a_role_declares_no_field_and_composes_only_parts() -> None:
    for role in ROLES:
        assert _declared(role) == set(), role
        assert role.__bases__, role
        assert all(base in PARTS for base in role.__bases__), role
        composed = set().union(*(_declared(base) for base in role.__bases__))
        assert set(role.model_fields) == composed, role


def test_every_settings_class_is_a_part_or_a_role() -> None:
    assert _settings_classes() == {Part, *PARTS, *ROLES}


def test_every_part_is_read_by_a_role() -> None:
    assert {base for role in ROLES for base in role.__bases__} == set(PARTS)


def _other_than_default(field: FieldInfo) -> tuple[str, Any]:
    """A valid value other than the field's default: the variable's text and the value read."""
    default = field.default
    if isinstance(default, bool):
        return str(not default).lower(), not default
    if isinstance(default, int | float):
        return str(default + 1), default + 1
    if isinstance(default, SecretStr):
        return "from-the-environment", SecretStr("from-the-environment")
    assert isinstance(default, str)
    return f"{default}-from-the-environment", f"{default}-from-the-environment"


@pytest.mark.parametrize("role", ROLES, ids=lambda role: role.__name__)
def test_each_field_is_read_from_its_documented_variable(
    role: type[Part], monkeypatch: pytest.MonkeyPatch
) -> None:
    expected: dict[str, Any] = {}
    for name, field in role.model_fields.items():
        if name == "database_url_file":  # names a file, exclusive with database_url: its own test
            continue  # (tests/test_database_url_file.py)
        text, expected[name] = _other_than_default(field)
        monkeypatch.setenv(variable(name), text)
    settings = role()
    assert {name: getattr(settings, name) for name in expected} == expected


def test_each_notifier_secret_may_come_from_a_file_and_nothing_else_does() -> None:
    fields = NotifierPart.model_fields
    secrets = {name for name, field in fields.items() if field.annotation is SecretStr}
    assert {name for name in fields if name.endswith("_file")} == {f"{s}_file" for s in secrets}


def test_the_api_and_the_cli_read_cost_and_report_settings_from_one_declaration() -> None:
    shared = set(ApiSettings.model_fields) & set(Settings.model_fields)
    assert shared == {"cost_model", "report_timezone", "attribution_top_n"}
