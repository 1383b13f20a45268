"""The API service's own settings (``INFERSIGHT_*``), separate from the CLI's store settings.

Every field is documented in the README's settings table; ``tests/test_readme.py`` checks it.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ApiSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="INFERSIGHT_", extra="ignore", frozen=True)

    listen: str = Field("127.0.0.1:8080", description="HOST:PORT the API listens on.")
    api_tokens: str = Field(
        "", description="Bearer tokens as comma-separated SCOPE:TOKEN pairs (scope read or admin)."
    )
    api_tokens_file: str = Field(
        "", description="A secrets file with one 'SCOPE TOKEN' pair per line ('#' comments)."
    )
    insecure_no_auth: bool = Field(
        False, description="Serve without tokens on a non-loopback address (warns at start-up)."
    )
    allowed_hosts: str = Field(
        "",
        description="Host names the API answers to besides its listen address and localhost "
        "(comma-separated; '.example.com' for a domain and its subdomains, '*' for any).",
    )
    header_timeout_s: float = Field(
        10.0, gt=0, le=300, description="Seconds a client has to send a request's headers."
    )
    keep_alive_s: int = Field(
        5, ge=1, le=300, description="Seconds an idle keep-alive connection stays open."
    )
    max_connections: int = Field(
        256, ge=1, le=100_000, description="Open connections at most; more are closed at once."
    )
    run_jobs: bool = Field(True, description="Run the scheduled jobs in this process.")
    evaluation_interval_s: float = Field(30.0, gt=0, description="Seconds between SLO evaluations.")
    maintenance_interval_s: float = Field(
        3600.0, gt=0, description="Seconds between partition and retention maintenance runs."
    )
    max_body_bytes: int = Field(1_048_576, ge=1024, description="Largest request body accepted.")
    metrics_cache_s: float = Field(
        10.0, ge=0, description="Seconds later /metrics scrapes reuse a computed answer (0: never)."
    )
    max_query_days: int = Field(400, ge=1, description="Longest time window a query may cover.")
    cost_model: str = Field(
        "default",
        max_length=128,
        description="Name of the stored cost model to use (example list prices when absent).",
    )
    report_timezone: str = Field(
        "UTC", description="IANA time zone of weekly report periods and their schedule."
    )
    report_schedule: str = Field(
        "mon 09:00",
        description="When the weekly cost report job runs: DAY HH:MM in report_timezone.",
    )
