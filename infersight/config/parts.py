"""The parts the roles' settings are composed of; each field is declared in exactly one.

A part is a ``BaseSettings`` read from the environment (``INFERSIGHT_`` and the field's name,
upper-case). A role inherits the parts it reads and declares no field itself; every field is
documented in docs/settings.md's or docs/notifications.md's table (``tests/test_readme.py``, and
``tests/test_settings.py`` for the rule).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from infersight.core.accept import MAX_FUTURE_SKEW_S, AcceptWindow
from infersight.core.errors import ConfigurationError

PREFIX = "INFERSIGHT_"
#: Where the store is when ``INFERSIGHT_DATABASE_URL`` does not say.
DEFAULT_DATABASE_URL = "sqlite:///infersight.db"


def variable(field: str) -> str:
    """The environment variable the setting ``field`` is read from."""
    return PREFIX + field.upper()


#: The most a secret's file may hold (a URL or a key is far less).
SECRET_FILE_MAX_BYTES = 64 * 1024


def read_secret_file(setting: str, path: str) -> str:
    """The value in the file ``path`` that the variable ``setting`` names, without its
    surrounding white space; a clear error, never the value, when it cannot be used."""
    try:
        with open(path, "rb") as source:
            data = source.read(SECRET_FILE_MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigurationError(f"{setting}: cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > SECRET_FILE_MAX_BYTES:
        raise ConfigurationError(f"{setting}: {path} holds more than {SECRET_FILE_MAX_BYTES} bytes")
    try:
        value = data.decode().strip()
    except UnicodeDecodeError:
        raise ConfigurationError(f"{setting}: {path} is not UTF-8 text") from None
    if not value:
        raise ConfigurationError(f"{setting}: {path} is empty")
    return value


class Part(BaseSettings):
    """What every part shares: the prefix, unknown variables ignored, values fixed once read."""

    model_config = SettingsConfigDict(env_prefix=PREFIX, extra="ignore", frozen=True)


class StorePart(Part):
    """The store: where it is, how long it keeps what, and what it accepts."""

    database_url: str = Field(DEFAULT_DATABASE_URL, description="Store URL: PostgreSQL or SQLite.")
    database_url_file: str = Field(
        "",
        description="A file holding the store URL, so that its password need not sit in the "
        "environment; setting INFERSIGHT_DATABASE_URL as well is an error.",
    )
    database_read_url: str = Field(
        "",
        description="PostgreSQL URL of a hot standby of the store that the API's read-only "
        "answers are read from (empty: the store serves them).",
    )
    telemetry_url: str = Field(
        "",
        description="ClickHouse URL that holds the telemetry (requests, prefill legs, gateway "
        "spans, client records, late sequences, server scrapes, GPU samples and their rollups) "
        "and answers every telemetry read (clickhouse://user:password@host:8123/database, "
        "chdb://PATH in process); the store keeps the state. Empty: the store holds all of it "
        "(docs/past-one-primary.md).",
    )
    telemetry_cluster: str = Field(
        "",
        description="With a telemetry URL: the ClickHouse cluster's name (as in the servers' "
        "remote_servers): every table is made ON CLUSTER, replicated (the {shard} and "
        "{replica} macros) and sharded behind a Distributed table. Empty: one server.",
    )
    telemetry_sql_copy: bool = Field(
        False,
        description="With a telemetry URL: write the telemetry to the store too, under the "
        "same acknowledgement (while moving a fleet from the store to ClickHouse: the store's "
        "answers stay whole until the switch). Reads come from ClickHouse either way.",
    )
    raw_retention_days: int = Field(14, ge=1, description="Days of raw requests and samples kept.")
    minute_rollup_retention_days: int = Field(14, ge=1, description="Days of minute rollups kept.")
    hour_rollup_retention_days: int = Field(180, ge=1, description="Days of hour rollups kept.")
    day_rollup_retention_days: int = Field(1095, ge=1, description="Days of day rollups kept.")
    profile_retention_days: int = Field(
        30, ge=1, le=36500, description="Days finished profiles (and their summaries) are kept."
    )
    partition_ahead_days: int = Field(
        3, ge=0, le=60, description="Daily partitions created ahead of time (PostgreSQL)."
    )
    max_future_skew_s: float = Field(
        300.0,
        ge=0,
        le=MAX_FUTURE_SKEW_S,
        description="Seconds a span may start after the sidecar's clock and still be accepted.",
    )
    exact_max_rows: int = Field(
        200_000, ge=0, description="Above this many requests, quantiles come from sketches."
    )
    database_connect_timeout_s: float = Field(
        10.0, gt=0, le=3600, description="Seconds connecting to PostgreSQL may take."
    )
    database_statement_timeout_s: float = Field(
        30.0, ge=0, description="Seconds one PostgreSQL statement may run (0: no bound)."
    )
    database_lock_timeout_s: float = Field(
        10.0,
        ge=0,
        description="Seconds one PostgreSQL statement may wait for a lock (0: no bound).",
    )
    database_idle_in_transaction_timeout_s: float = Field(
        60.0, ge=0, description="Seconds a PostgreSQL transaction may stay idle (0: no bound)."
    )
    database_pool_timeout_s: float = Field(
        30.0, gt=0, le=3600, description="Seconds a store call may wait for a pooled connection."
    )
    sqlite_busy_timeout_s: float = Field(
        30.0, ge=0, le=3600, description="Seconds a SQLite statement may wait for a lock."
    )

    @model_validator(mode="before")
    @classmethod
    def _url_from_file(cls, data: Any) -> Any:
        """``database_url`` read from ``database_url_file`` when that names a file; the file is
        then consumed (the field left empty), so that settings made again from these settings'
        values (``model_dump``) hold the URL only, as if it had come from the environment."""
        if not isinstance(data, dict) or not data.get("database_url_file"):
            return data
        name = variable("database_url_file")
        if data.get("database_url"):
            raise ConfigurationError(
                f"{variable('database_url')} and {name} are both set: set one of them"
            )
        url = read_secret_file(name, str(data["database_url_file"]))
        return {**data, "database_url": url, "database_url_file": ""}

    def store_timeouts(self) -> dict[str, float]:
        """The bounds of every store call, as ``storage.engine.StoreTimeouts`` takes them."""
        return {
            "connect_s": self.database_connect_timeout_s,
            "statement_s": self.database_statement_timeout_s,
            "lock_s": self.database_lock_timeout_s,
            "idle_in_transaction_s": self.database_idle_in_transaction_timeout_s,
            "pool_s": self.database_pool_timeout_s,
            "sqlite_busy_s": self.sqlite_busy_timeout_s,
        }

    def accept_window(self) -> AcceptWindow:
        """Starts a sidecar and the store accept: raw retention back, the skew ahead."""
        return AcceptWindow.of_days(self.raw_retention_days, self.max_future_skew_s)


class CostReportPart(Part):
    """How GPU time is priced and in which time zone weekly reports are cut."""

    cost_model: str = Field(
        "default",
        max_length=128,
        description="Name of the stored cost model to use (example list prices when absent).",
    )
    report_timezone: str = Field(
        "UTC", description="IANA time zone of weekly report periods and their schedule."
    )
    attribution_top_n: int = Field(
        20,
        ge=1,
        le=1000,
        description="How many tenants, teams or workloads an answer that groups by them keeps "
        "apart (by cost, or requests); the rest are folded into '(other)'.",
    )


class ApiPart(Part):
    """The API's listener: address, tokens, host names and its limits."""

    listen: str = Field("127.0.0.1:8080", description="HOST:PORT the API listens on.")
    api_tokens: str = Field(
        "", description="Bearer tokens as comma-separated SCOPE:TOKEN pairs (scope read or admin)."
    )
    api_tokens_file: str = Field(
        "", description="A secrets file with one 'SCOPE TOKEN' pair per line ('#' comments)."
    )
    auth_failures_per_client: int = Field(
        10,
        ge=1,
        le=1_000_000,
        description="Unknown tokens one client address may send in a minute before every "
        "token check from it is answered 429.",
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
        256,
        ge=1,
        le=100_000,
        description="Open connections at most; at the cap an idle one is closed for a newcomer.",
    )
    max_body_bytes: int = Field(1_048_576, ge=1024, description="Largest request body accepted.")
    metrics_cache_s: float = Field(
        10.0, ge=0, description="Seconds later /metrics scrapes reuse a computed answer (0: never)."
    )
    max_query_days: int = Field(400, ge=1, description="Longest time window a query may cover.")
    dashboard_answer_ttl_s: float = Field(
        5.0,
        ge=0,
        le=300,
        description="Seconds a dashboard page reuses the answer computed for the same query "
        "(0: never).",
    )
    answer_concurrency: int = Field(
        2,
        ge=0,
        le=256,
        description="Dashboard pages and read answers computed at once; the others wait their "
        "turn in arrival order (0: no limit).",
    )
    model_aliases: str = Field(
        "",
        description="Model name aliases as comma-separated ALIAS=CANONICAL pairs, for matching "
        "client and server model names (besides the default: org/ prefix stripped, any case).",
    )


class JobsPart(Part):
    """The scheduled jobs of an API process: whether they run, and how often."""

    run_jobs: bool = Field(True, description="Run the scheduled jobs in this process.")
    leader_lock_url: str = Field(
        "",
        description="Direct PostgreSQL URL (same database, no pooler) for the jobs leader's "
        "lock; required when the store URL has pooler=transaction.",
    )
    evaluation_interval_s: float = Field(30.0, gt=0, description="Seconds between SLO evaluations.")
    delivery_interval_s: float = Field(
        10.0,
        gt=0,
        description="Seconds between follow-up passes: open incidents re-diagnosed, pending "
        "notifications delivered (or retried), automatic profiles requested.",
    )
    scaling_interval_s: float = Field(
        60.0, gt=0, description="Seconds between replica recommendations (one per model)."
    )
    budget_interval_s: float = Field(
        300.0,
        gt=0,
        description="Seconds between money-alert evaluations (budgets, cost per million tokens).",
    )
    maintenance_interval_s: float = Field(
        3600.0, gt=0, description="Seconds between partition and retention maintenance runs."
    )
    profile_max_automatic: int = Field(
        2,
        ge=0,
        le=1000,
        description="Automatic profiles of incidents open (pending or running) fleet-wide at "
        "once, at most (0: none are requested).",
    )
    report_schedule: str = Field(
        "mon 09:00",
        description="When the weekly cost report job runs: DAY HH:MM in report_timezone.",
    )


class SidecarPart(Part):
    """The sidecar's own: the token its receivers require, and which attributes of gateway
    and client spans name who a trace's requests are for."""

    otlp_token: SecretStr = Field(
        SecretStr(""),
        description="Bearer token the sidecar's receivers require (--token-file overrides it; a "
        "token on the command line is refused).",
    )
    attribution: str = Field(
        "",
        description="Which attributes of gateway and client spans name a trace's tenant, team, "
        "workload and adapter: preset names (litellm, llm-d, envoy-ai-gateway, openai-sdk) "
        "and dimension=attr1|attr2 rules, comma-separated (resource.NAME: a resource "
        "attribute). --attribution and --attribution-file override it.",
    )


class NotifierPart(Part):
    """Where incidents are sent. Each secret may instead come from the file its ``_file``
    field names (``INFERSIGHT_…_FILE``); the value, when set, wins."""

    slack_webhook_url: SecretStr = Field(SecretStr(""), description="Slack incoming webhook.")
    slack_webhook_url_file: str = Field("", description="A file holding the Slack webhook URL.")
    pagerduty_routing_key: SecretStr = Field(
        SecretStr(""), description="PagerDuty Events API v2 routing key."
    )
    pagerduty_routing_key_file: str = Field(
        "", description="A file holding the PagerDuty routing key."
    )
    pagerduty_url: str = Field(
        "", description="PagerDuty Events endpoint (default: the public Events v2 endpoint)."
    )
    alertmanager_url: SecretStr = Field(
        SecretStr(""), description="Prometheus Alertmanager base URL."
    )
    alertmanager_url_file: str = Field("", description="A file holding the Alertmanager URL.")


#: Every part; ``tests/test_settings.py`` holds each field to one of them.
PARTS: tuple[type[Part], ...] = (
    StorePart,
    ApiPart,
    JobsPart,
    CostReportPart,
    SidecarPart,
    NotifierPart,
)
