"""The README documents every setting, with its real default, and nothing that does not exist."""

from __future__ import annotations

import re
from pathlib import Path

from api.settings import ApiSettings
from infersight.settings import Settings

README = Path(__file__).resolve().parents[1] / "README.md"
ROW = re.compile(r"^\| `(INFERSIGHT_[A-Z_]+)` \| `([^`]*)` \|", re.MULTILINE)


def test_every_setting_is_in_the_readme_with_its_default():
    documented = dict(ROW.findall(README.read_text()))
    fields = {
        f"INFERSIGHT_{name.upper()}": str(field.default)
        for model in (Settings, ApiSettings)
        for name, field in model.model_fields.items()
    }
    assert documented == fields


def test_the_readme_has_exactly_the_two_setup_commands():
    text = README.read_text()
    block = text.split("## Quick start", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == ["pip install -e '.[all]' && infersight demo", "bash .ci/run"]
