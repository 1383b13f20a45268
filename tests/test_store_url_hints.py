"""A store URL that is not one (issue 35, item 7): the error echoes what was given (any
password hidden) and says what to write instead — ``sqlite:///PATH`` for a path,
``postgresql://…`` for what looks like PostgreSQL — from every way a URL reaches the store."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

from infersight.core.errors import ConfigurationError
from infersight.storage.engine import normalise_url, redact

CLI = "from infersight.cli import main; main()"


@pytest.mark.parametrize(
    ("given", "echoed", "hint"),
    [
        pytest.param("x.db", "'x.db'", "sqlite:///x.db", id="a file name"),
        pytest.param(
            "data/infersight.sqlite",
            "'data/infersight.sqlite'",
            "sqlite:///data/infersight.sqlite",
            id="a relative path",
        ),
        pytest.param(
            "/var/lib/infersight.db",
            "'/var/lib/infersight.db'",
            "sqlite:////var/lib/infersight.db",
            id="an absolute path",
        ),
        pytest.param("~/store.db", "'~/store.db'", "sqlite:///", id="a home path"),
        pytest.param(
            "postgres@localhost/infersight",
            "'postgres@localhost/infersight'",
            "postgresql://postgres@localhost/infersight",
            id="user at host",
        ),
        pytest.param(
            "infersight:s3cret@db:5432/fleet",
            "'infersight:***@db:5432/fleet'",
            "postgresql://infersight:PASSWORD@db:5432/fleet",
            id="a password hidden",
        ),
        pytest.param("sqlite:x.db", "'sqlite:x.db'", "sqlite:///x.db", id="sqlite without slashes"),
        pytest.param(
            "localhost:5432/fleet",
            "'localhost:5432/fleet'",
            "postgresql://localhost:5432/fleet",
            id="host and port",
        ),
        pytest.param(
            "postgresql:/db.internal/fleet",
            "'postgresql:/db.internal/fleet'",
            "postgresql://db.internal/fleet",
            id="one slash",
        ),
    ],
)
def test_a_malformed_url_is_echoed_with_what_to_write_instead(
    given: str, echoed: str, hint: str
) -> None:
    with pytest.raises(ConfigurationError) as raised:
        normalise_url(given)
    message = str(raised.value)
    assert f"not a database URL: {echoed}" in message
    assert hint in message
    assert "s3cret" not in message
    assert "<unparseable URL>" not in message


def test_a_sqlite_url_with_two_slashes_is_refused_with_three() -> None:
    # sqlite://x.db names a host: SQLAlchemy refused it with a traceback
    with pytest.raises(ConfigurationError, match=r"'sqlite://x\.db'.*sqlite:///x\.db"):
        normalise_url("sqlite://x.db")
    assert normalise_url("sqlite:///x.db") == "sqlite:///x.db"


def test_an_unknown_backend_says_which_are_supported() -> None:
    with pytest.raises(ConfigurationError) as raised:
        normalise_url("mysql://u:pw@h/db")
    assert "postgresql://" in str(raised.value)
    assert "sqlite:///" in str(raised.value)
    assert "pw" not in str(raised.value) + repr(raised.value.details)


def test_redact_hides_the_password_of_an_unparseable_url_but_shows_the_rest() -> None:
    assert redact("x.db") == "x.db"
    assert redact("u:secret@h/db") == "u:***@h/db"


def test_the_cli_names_the_input_and_the_url_to_use(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("INFERSIGHT_")}
    done = subprocess.run(
        [sys.executable, "-c", CLI, "--store", "x.db", "slo", "list"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "not a database URL: 'x.db'" in done.stderr
    assert "sqlite:///x.db" in done.stderr
    assert not (tmp_path / "x.db").exists()  # nothing created on the way
    env["INFERSIGHT_DATABASE_URL"] = "x.db"
    done = subprocess.run(
        [sys.executable, "-c", CLI, "slo", "list"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "sqlite:///x.db" in done.stderr, done.stderr


#: Passwords with every character that can end a naive parse early; each piece of them is
#: a token that shows nowhere else ("Zq", "Xw", "Vy"), so no part of one may be echoed.
NASTY = ("Zq/Xw", "Zq:Xw@Vy", "Zq?Xw=Vy", "Zq#Xw", "Zq%2FXw", "Zq/Xw@Vy:Zq?Xw#Vy", "Zq&Xw")
PIECES = ("Zq", "Xw", "Vy")


def _shown(text: str) -> list[str]:
    return [piece for piece in PIECES if piece in text]


@pytest.mark.parametrize("secret", NASTY)
@pytest.mark.parametrize(
    "form",
    [
        pytest.param("u:{}@db.internal:5432/fleet", id="no scheme"),
        pytest.param("postgresql:/u:{}@db.internal/fleet", id="one slash"),
        pytest.param("postgresql://u:{}@db.internal:port/fleet", id="a port that is no number"),
        pytest.param("mysql://u:{}@db.internal/fleet", id="another backend"),
        pytest.param("db.internal:5432/fleet?password={}", id="a query password"),
        pytest.param(
            "postgresql://u@db.internal:x/fleet?sslpassword={}", id="a query ssl password"
        ),
    ],
)
def test_no_piece_of_a_password_is_echoed_however_it_is_written(
    form: str, secret: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = form.format(secret)
    caplog.set_level(logging.DEBUG)
    try:
        normalise_url(url)
    except ConfigurationError as exc:
        said = str(exc) + repr(exc.details)
        assert "not a database URL" in said or "PostgreSQL or SQLite" in said
    else:  # a raw '@' in the password can make it parse: then only the redacted form is shown
        assert "@" in secret, url
        said = ""
    said += caplog.text + redact(url)
    if secret != "Zq&Xw" or "?" not in form:  # '&' ends a query value: the rest is no secret
        assert _shown(said) == [], said


@pytest.mark.parametrize("secret", NASTY)
def test_redact_hides_the_query_passwords_of_a_valid_url(secret: str) -> None:
    quoted = quote(secret, safe="")
    url = (
        f"postgresql+psycopg://u:{quoted}@h:5432/db?password={quoted}"
        f"&sslpassword={quoted}&application_name=x"
    )
    shown = redact(url)
    assert _shown(shown) == [], shown
    assert "application_name=x" in shown
    assert shown.startswith("postgresql+psycopg://u:***@h:5432/db?")


def test_a_port_that_is_no_number_is_a_clear_error() -> None:
    with pytest.raises(ConfigurationError, match="its port must be a number"):
        normalise_url("postgresql://u:pw@h:54x2/db")
    assert redact("postgresql://u:pw@h:54x2/db") == "postgresql://u:***@h:54x2/db"
