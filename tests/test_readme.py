"""The reference documents every setting, with its real default, and nothing that does not exist
(docs/settings.md, docs/notifications.md); the README keeps the Quick start."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from pydantic import SecretStr

from infersight.api.settings import ApiSettings
from infersight.cli.settings import Settings, SidecarSettings
from infersight.config.parts import PARTS, NotifierPart, variable

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SETTINGS = ROOT / "docs" / "settings.md"
NOTIFICATIONS = ROOT / "docs" / "notifications.md"
PYPROJECT = ROOT / "pyproject.toml"
ROW = re.compile(r"^\| `(INFERSIGHT_[A-Z_]+)` \| `([^`]*)` \|", re.MULTILINE)
NAME = re.compile(r"^\| `(INFERSIGHT_[A-Z_]+)` \|", re.MULTILINE)
ROLES = (Settings, SidecarSettings, ApiSettings)


def _notifications() -> str:
    return NOTIFICATIONS.read_text()


def test_every_setting_is_in_the_settings_page_with_its_default():
    documented = dict(ROW.findall(SETTINGS.read_text()))
    fields = {
        variable(name): str(field.default)
        for part in PARTS
        if part is not NotifierPart
        for name, field in part.model_fields.items()
    }
    assert documented == fields


def test_every_notifier_is_in_the_notifications_page_and_its_secrets_may_come_from_files():
    section = _notifications()
    fields = {variable(name) for name in NotifierPart.model_fields if not name.endswith("_file")}
    assert set(NAME.findall(section)) == fields
    assert "named by the same variable with `_FILE` appended" in section


def test_the_readme_has_exactly_the_two_setup_commands_after_the_clone():
    """From a fresh machine: the clone, then the demo in a virtual environment of its own (a
    bare ``pip install`` is refused by Debian's and Ubuntu's Python, PEP 668), then the tests."""
    text = README.read_text()
    block = text.split("## Quick start", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == [
        "git clone https://github.com/infersight/infersight && cd infersight",
        "python3 -m venv .venv && .venv/bin/pip install -e '.[all]' && .venv/bin/infersight demo",
        "bash .ci/run",
    ]


def test_the_demo_s_extra_installs_every_role_the_demo_runs():
    """``.[all]`` in the Quick start is the sidecar, the server and the simulator."""
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    assert set(extras["all"]) == {"infersight[sidecar,server,simulator]"}


def test_the_roles_read_exactly_the_variables_the_docs_document():
    """The variables' names are the reference's: a renamed field, or a part no role reads, fails."""
    documented = set(dict(ROW.findall(SETTINGS.read_text()))) | set(NAME.findall(_notifications()))
    fields = {name: f for role in ROLES for name, f in role.model_fields.items()}
    from_files = {f"{name}_file" for name, f in fields.items() if f.annotation is SecretStr}
    assert {variable(name) for name in fields if name not in from_files} == documented
