"""The chart's opt-in profiles (``sidecar.profiles``): off by default; on, the sidecar gets the
``--profile-*`` flags and SYS_PTRACE in its bounding set while staying non-root (py-spy's file
capability: privilege escalation allowed, no setuid program in the image), the example pod
shares its process namespace, no key of the security context is written twice whatever the
user sets, and every object still validates against the Kubernetes schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from infersight.cli.commands_sidecar import sidecar

# Skips this module as test_helm does when helm-python-sdk (the dev extra) is missing.
from tests.deploy.test_helm import CHART, FULL, helm, one, render, sidecar_of, validate

ROOT = Path(__file__).resolve().parents[2]

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
    # Not root: the pod's user, and py-spy's file capability needs no_new_privs off.
    assert (context["runAsUser"], context["runAsNonRoot"]) == (10001, True)
    assert context["allowPrivilegeEscalation"] is True
    assert context["readOnlyRootFilesystem"] is True
    assert _pod(documents)["shareProcessNamespace"] is True
    off = {**ON, "sidecar": {**ON["sidecar"], "profiles": {"enabled": True, "native": False}}}
    assert "--profile-no-native" in sidecar_of(render(off))["args"]


def test_a_bad_profiles_value_is_refused() -> None:
    bad = {**ON, "sidecar": {**ON["sidecar"], "profiles": {"enabled": True, "rate": 5000}}}
    with pytest.raises(helm.HelmError, match="rate"):
        render(bad)


def test_the_serving_containers_user_or_root_as_a_fallback() -> None:
    def context(user: int) -> dict[str, Any]:
        profiles = {"enabled": True, "runAsUser": user}
        values = {**ON, "sidecar": {**ON["sidecar"], "profiles": profiles}}
        got: dict[str, Any] = sidecar_of(render(values))["securityContext"]
        return got

    assert (context(1000)["runAsUser"], context(1000)["runAsNonRoot"]) == (1000, True)
    root = context(0)
    assert (root["runAsUser"], root["runAsNonRoot"]) == (0, False)
    assert root["allowPrivilegeEscalation"] is False  # root needs no file capability


class _Strict(yaml.SafeLoader):
    """YAML that refuses a key written twice in one mapping (``safe_load`` keeps the last)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        keys = [self.construct_object(k, deep=deep) for k, _ in node.value]
        twice = sorted({str(k) for k in keys if keys.count(k) > 1})
        if twice:
            raise yaml.constructor.ConstructorError(
                None, None, f"keys twice: {twice}", node.start_mark
            )
        return super().construct_mapping(node, deep=deep)


@pytest.mark.parametrize("profiles", [False, True])
def test_a_users_own_security_context_is_not_written_twice(profiles: bool) -> None:
    mine = {"runAsUser": 2000, "runAsNonRoot": True, "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}  # fmt: skip
    values = {**ON, "securityContext": mine,
              "sidecar": {**ON["sidecar"], "profiles": {"enabled": profiles}}}  # fmt: skip
    with helm.Chart.load(str(CHART)) as chart:
        manifests = chart.render(values, name="prod", namespace="observability")
    for name, text in manifests.items():
        if name.endswith(".yaml"):
            assert list(yaml.load_all(text, Loader=_Strict)) is not None
    context = sidecar_of(render(values))["securityContext"]
    assert context["runAsUser"] == 2000
    assert context["allowPrivilegeEscalation"] is profiles


def test_the_image_gives_py_spy_its_capability_and_keeps_no_setuid_program() -> None:
    text = (ROOT / "Containerfile").read_text()
    runs = text.split("FROM ${BASE}\n", 1)[1]  # the stage that runs
    assert "setcap cap_sys_ptrace+ep" in runs
    assert "-perm /6000 -exec chmod a-s" in runs
