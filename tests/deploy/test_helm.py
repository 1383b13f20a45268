"""The Helm chart (``deploy/helm/infersight``), rendered by Helm's own template engine (Helm's Go
SDK, which ``helm-python-sdk`` bundles as a library: ``helm template`` without the binary) and
every rendered object validated against the Kubernetes schemas with ``kubernetes-validate``
(strict: an unknown field fails). The Prometheus Operator's kinds are not among those schemas:
the ServiceMonitor is checked against the fields of the operator's API the chart uses, and the
PrometheusRule's groups, exported by ``infersight slo export-rules``, by ``promtool``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from infersight.alerts.prometheus_rules import rule_groups, to_yaml
from infersight.cli.commands_sidecar import sidecar
from infersight.core.query import Selector
from infersight.core.slo import Sli, SliKind, SloSpec
from infersight.service.evaluation import default_policy

try:
    import helm_python as helm
except ImportError:  # the dev extra installs it; in CI a missing renderer fails
    if os.environ.get("CI"):
        raise
    pytest.skip("helm-python-sdk (the dev extra) renders the chart", allow_module_level=True)

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "infersight"
KUBERNETES = "1.34.0"
PROMTOOL = shutil.which("promtool")
TOKEN = "t0k3n-for-the-tests-only-000000"
SECRETS = (TOKEN, "r3ad-token-for-prometheus-00000", "otlp-token-of-the-sidecar-00000", "s3cret-pw")
SPEC = SloSpec(
    "chat-ttft", Sli(SliKind.LATENCY, "ttft", 2.0), 0.999, timedelta(days=28), Selector()
)
FULL: dict[str, Any] = {
    "database": {"url": "postgresql+psycopg://infersight:s3cret-pw@postgres:5432/infersight"},
    "api": {"tokens": [{"scope": "admin", "token": SECRETS[0]}], "env": {"INFERSIGHT_X": "1"}},
    "ingress": {"enabled": True, "host": "slo.example.com", "tlsSecret": "slo-tls"},
    "metrics": {
        "token": SECRETS[1],
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {
            "enabled": True,
            "groups": yaml.safe_load(to_yaml(rule_groups([SPEC], default_policy(), None)))[
                "groups"
            ],
        },
    },
    "sidecar": {"token": SECRETS[2]},
    "sidecarExample": {"enabled": True},
}

# The fields of monitoring.coreos.com/v1 ServiceMonitor that the chart writes, as the operator's
# API documents them; anything else is refused, so a misspelt field fails here too.
SERVICE_MONITOR = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "selector": {
                    "type": "object",
                    "properties": {"matchLabels": {"type": "object"}},
                    "additionalProperties": False,
                },
                "namespaceSelector": {
                    "type": "object",
                    "properties": {"matchNames": {"type": "array", "items": {"type": "string"}}},
                    "additionalProperties": False,
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                            "scrapeTimeout": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                            "authorization": {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["credentials"],
                                "properties": {
                                    "type": {"type": "string"},
                                    "credentials": {
                                        "type": "object",
                                        "required": ["name", "key"],
                                        "additionalProperties": False,
                                        "properties": {
                                            "name": {"type": "string"},
                                            "key": {"type": "string"},
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    with helm.Chart.load(str(CHART)) as chart:
        manifests = chart.render(values, name="prod", namespace="observability")
    return [
        document
        for name, text in manifests.items()
        if name.endswith(".yaml")
        for document in yaml.safe_load_all(text)
        if document
    ]


def validate(document: dict[str, Any]) -> None:
    if document["kind"] == "ServiceMonitor":
        jsonschema.validate(document, SERVICE_MONITOR)
    elif document["kind"] == "PrometheusRule":
        assert document["apiVersion"] == "monitoring.coreos.com/v1"
        assert set(document["spec"]) == {"groups"}
    else:
        kubernetes_validate.validate(document, KUBERNETES, strict=True)


def one(documents: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    [found] = [
        d
        for d in documents
        if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    return found


def sidecar_of(documents: list[dict[str, Any]]) -> dict[str, Any]:
    pod = one(documents, "Deployment", "vllm-example")["spec"]["template"]["spec"]
    [container] = [c for c in pod["initContainers"] if c["name"] == "infersight-sidecar"]
    return container


@pytest.fixture(scope="module")
def full() -> list[dict[str, Any]]:
    return render(FULL)


def test_every_rendered_object_validates(full: list[dict[str, Any]]) -> None:
    kinds = sorted(d["kind"] for d in full)
    assert kinds == sorted(
        [
            "Deployment",
            "Deployment",
            "Ingress",
            "Job",
            "PrometheusRule",
            "Secret",
            "Secret",
            "Secret",
            "Service",
            "ServiceMonitor",
        ]
    )
    for document in full:
        validate(document)


def test_the_defaults_render_the_api_and_its_migrations_only() -> None:
    documents = render({"database": FULL["database"], "api": {"tokens": FULL["api"]["tokens"]}})
    assert sorted(d["kind"] for d in documents) == [
        "Deployment",
        "Job",
        "Secret",
        "Secret",
        "Service",
    ]
    for document in documents:
        validate(document)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"api": {"tokens": FULL["api"]["tokens"]}}, "database.url"),
        ({"database": FULL["database"]}, "api.tokens"),
        (
            {
                "database": FULL["database"],
                "api": {"tokens": [{"scope": "admin", "token": "short"}]},
            },
            "at '/api/tokens/0/token': minLength: got 5, want 16",
        ),
        # values.schema.json: a misspelt or unknown value, and values out of their domain
        ({**FULL, "api": {**FULL["api"], "replica": 2}}, "additional properties 'replica'"),
        ({**FULL, "sidecar": {"gpuSource": "cuda"}}, "/sidecar/gpuSource"),
        (
            {**FULL, "api": {"tokens": [{"scope": "root", "token": TOKEN}]}},
            "/api/tokens/0/scope",
        ),
        ({**FULL, "api": {**FULL["api"], "env": {"LOG_LEVEL": "x"}}}, "'LOG_LEVEL' does not match"),
        ({**FULL, "database": {"url": "mysql://db/x"}}, "/database/url"),
        (
            {**FULL, "metrics": {"prometheusRule": {"enabled": True}}},
            "metrics.prometheusRule.groups is empty",
        ),
        ({**FULL, "sidecar": {"token": ""}}, "sidecar.token"),
    ],
)
def test_missing_or_bad_values_fail_with_the_value_named(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm.HelmError, match=re.escape(message)):
        render(values)


def test_a_misspelt_field_fails_validation(full: list[dict[str, Any]]) -> None:
    deployment = one(full, "Deployment", "prod-infersight")
    deployment["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(deployment)
    monitor = one(full, "ServiceMonitor")
    monitor["spec"]["endpoints"][0]["bearerTokn"] = "x"
    with pytest.raises(jsonschema.ValidationError):
        validate(monitor)


def test_helm_lints_the_chart_cleanly() -> None:
    report = helm.lint(str(CHART), strict=True, kube_version=f"v{KUBERNETES}", values=FULL)
    assert not report["errors"], report
    assert [m for m in report["messages"] if m["severity"] >= 2] == [], report


def test_the_sidecar_is_a_native_sidecar_with_its_spool_probes_and_resources(
    full: list[dict[str, Any]],
) -> None:
    container = sidecar_of(full)
    assert container["restartPolicy"] == "Always"
    # /healthz answers 200 while the store is unreachable (the sidecar spools): it holds the
    # server's start until the receivers accept, and restarts a dead sidecar; never ?strict=1,
    # and no readiness probe, which would take the inference pod out of its Service.
    for probe in ("startupProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "otlp-http"}
    assert "readinessProbe" not in container
    assert container["resources"]["requests"]
    assert container["resources"]["limits"]
    pod = one(full, "Deployment", "vllm-example")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert volumes["infersight-spool"]["emptyDir"]["sizeLimit"] == "2Gi"
    assert f"--spool-dir={mounts['infersight-spool']}" in container["args"]
    assert f"--token-file={mounts['infersight-otlp-token']}/otlp-token" in container["args"]
    # the inference server sends its traces to the sidecar's gRPC port, with the token
    [vllm] = pod["containers"]
    assert "--otlp-traces-endpoint=http://127.0.0.1:4317" in vllm["args"]
    assert "--scrape=http://127.0.0.1:8000/metrics" in container["args"]
    env = {e["name"]: e for e in vllm["env"]}
    assert env["OTEL_EXPORTER_OTLP_TRACES_HEADERS"]["value"].startswith("authorization=Bearer")


def test_every_sidecar_flag_the_chart_passes_exists() -> None:
    flags = {opt for param in sidecar.params for opt in param.opts}
    readme = (CHART / "README.md").read_text(encoding="utf-8")
    used = set(re.findall(r"(?m)^\s*- (--[a-z-]+)=", readme))
    used |= {a.split("=", 1)[0] for a in sidecar_of(render(FULL))["args"] if a.startswith("--")}
    assert used, "no sidecar flag found"
    assert used <= flags, used - flags


def test_the_documented_snippet_is_what_the_chart_renders_and_validates() -> None:
    readme = (CHART / "README.md").read_text(encoding="utf-8")
    [snippet] = [b for b in re.findall(r"```yaml\n(.*?)```", readme, re.S) if "initContainers" in b]
    documented = yaml.safe_load(snippet)
    rendered = sidecar_of(render({**FULL, "sidecarExample": {"enabled": True, "model": ""}}))
    # the snippet names its Secrets plainly; the chart names them after the release
    rendered["env"][1]["valueFrom"]["secretKeyRef"]["name"] = "infersight-database"
    del rendered["imagePullPolicy"]
    assert documented["initContainers"] == [rendered]
    pod = one(render(FULL), "Deployment", "vllm-example")["spec"]["template"]["spec"]
    pod["volumes"][1]["secret"]["secretName"] = "infersight-sidecar"
    assert documented["volumes"] == pod["volumes"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "inference"},
        "spec": {
            **documented,
            "containers": [{"name": "server", "image": "vllm/vllm-openai:latest"}],
        },
    }
    kubernetes_validate.validate(pod, KUBERNETES, strict=True)


def test_no_secret_is_on_a_command_line(full: list[dict[str, Any]]) -> None:
    for document in full:
        pod = document.get("spec", {}).get("template", {}).get("spec")
        if pod is None:
            continue
        for container in pod.get("initContainers", []) + pod["containers"]:
            argv = " ".join(container.get("command", []) + container.get("args", []))
            assert not any(secret in argv for secret in SECRETS), container["name"]
            for variable in container.get("env", []):
                assert not any(s in str(variable.get("value", "")) for s in SECRETS)


def test_the_migrations_run_as_a_hook_before_install_and_upgrade(
    full: list[dict[str, Any]],
) -> None:
    job = one(full, "Job")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] + container["args"] == ["infersight", "db", "upgrade"]
    # the Secret the Job reads exists before it: a hook of a lower weight
    database = one(full, "Secret", "prod-infersight-database")
    weight = int(database["metadata"]["annotations"]["helm.sh/hook-weight"])
    assert weight < int(job["metadata"]["annotations"]["helm.sh/hook-weight"])
    api = one(full, "Deployment", "prod-infersight")["spec"]["template"]["spec"]["containers"][0]
    assert "--no-migrate" in api["args"]


def test_the_api_reads_its_tokens_from_a_file_and_prometheus_gets_a_read_token(
    full: list[dict[str, Any]],
) -> None:
    api = one(full, "Deployment", "prod-infersight")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in api["env"]}
    assert env["INFERSIGHT_API_TOKENS_FILE"] == "/run/secrets/infersight/api/api-tokens"
    assert env["INFERSIGHT_ALLOWED_HOSTS"].startswith("$(POD_IP),")
    assert "slo.example.com" in env["INFERSIGHT_ALLOWED_HOSTS"].split(",")
    tokens = one(full, "Secret", "prod-infersight-api")["stringData"]
    assert tokens["api-tokens"].split("\n") == [
        f"admin {SECRETS[0]}",
        f"read {SECRETS[1]}",
        "",
    ]
    credentials = one(full, "ServiceMonitor")["spec"]["endpoints"][0]["authorization"]
    assert credentials["credentials"] == {"name": "prod-infersight-api", "key": "metrics-token"}
    assert tokens["metrics-token"] == SECRETS[1]


@pytest.mark.skipif(
    PROMTOOL is None and not os.environ.get("CI"),
    reason="promtool is not installed (Debian's prometheus package; CI installs it)",
)
def test_the_prometheus_rule_carries_the_exported_burn_rate_rules(
    full: list[dict[str, Any]], tmp_path: Path
) -> None:
    assert PROMTOOL is not None
    rule = one(full, "PrometheusRule")
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    done = subprocess.run(
        [PROMTOOL, "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert alerts
