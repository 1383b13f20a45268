"""The chart's opt-in profiles (``sidecar.profiles``): off by default; on, the sidecar gets the
``--profile-*`` flags and SYS_PTRACE, the example pod shares its process namespace, and every
object still validates against the Kubernetes schemas."""

from __future__ import annotations

from typing import Any

import pytest

from infersight.cli.commands_sidecar import sidecar

# Skips this module as test_helm does when helm-python-sdk (the dev extra) is missing.
from tests.deploy.test_helm import FULL, helm, one, render, sidecar_of, validate

ON: dict[str, Any] = {
    **FULL,
    "sidecar": {**FULL["sidecar"], "profiles": {"enabled": True, "target": "vllm", "rate": 20}},
}


def _pod(documents: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(documents, "Deployment", "vllm-example")["spec"]["template"]["spec"]
    return spec


def test_profiles_are_off_by_default() -> None:
    documents = render(FULL)
    container = sidecar_of(documents)
    assert not [a for a in container["args"] if a.startswith("--profile")]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["runAsNonRoot"] is True
    assert "shareProcessNamespace" not in _pod(documents)


def test_profiles_on_grant_what_py_spy_needs_and_validate() -> None:
    documents = render(ON)
    for document in documents:
        if document["kind"] not in ("ServiceMonitor", "PrometheusRule"):
            validate(document)
    container = sidecar_of(documents)
    args = [a for a in container["args"] if a.startswith("--profile")]
    assert args == ["--profile-target=vllm", "--profile-max-seconds=30", "--profile-rate=20"]
    flags = {opt for param in sidecar.params for opt in param.opts}
    assert {a.split("=")[0] for a in args} <= flags
    context = container["securityContext"]
    assert context["capabilities"] == {"drop": ["ALL"], "add": ["SYS_PTRACE"]}
    assert (context["runAsUser"], context["runAsNonRoot"]) == (0, False)
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert _pod(documents)["shareProcessNamespace"] is True
    off = {**ON, "sidecar": {**ON["sidecar"], "profiles": {"enabled": True, "native": False}}}
    assert "--profile-no-native" in sidecar_of(render(off))["args"]


def test_a_bad_profiles_value_is_refused() -> None:
    bad = {**ON, "sidecar": {**ON["sidecar"], "profiles": {"enabled": True, "rate": 5000}}}
    with pytest.raises(helm.HelmError, match="rate"):
        render(bad)
