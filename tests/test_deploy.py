"""The operator's files: Kubernetes manifests valid against Kubernetes' own JSON schemas
(kubernetes-validate ships them), and both they and compose.yaml naming what the product has:
its commands, its health endpoints, a volume per worker."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bot.cli import build_parser
from bot.server import make_app
from handlers import router

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = sorted((ROOT / "deploy/kubernetes").glob("*.yaml"))
KUBERNETES = "1.30"  # the oldest minor still supported upstream when these were written


def documents() -> list[tuple[str, dict]]:
    found = []
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                found.append((f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc))
    return found


def containers(doc: dict) -> list[dict]:
    spec = doc.get("spec") or {}
    template = spec.get("template") or spec.get("jobTemplate", {}).get("spec", {}).get("template")
    return template["spec"]["containers"] if template else []


def routes(settings) -> set[str]:
    app = make_app(settings, router, role="all")
    return {resource.canonical for resource in app.router.resources()}


def test_there_are_manifests_for_each_role():
    kinds = {name.split(":")[1].split("/")[0] for name, _ in documents()}
    assert {"Deployment", "Job", "Service", "Secret"} <= kinds


@pytest.mark.parametrize(("name", "doc"), documents(), ids=[name for name, _ in documents()])
def test_manifest_is_valid_kubernetes(name, doc):
    import kubernetes_validate

    kubernetes_validate.validate(doc, KUBERNETES, strict=True)  # raises with the path on error


@pytest.mark.parametrize(("name", "doc"), documents(), ids=[name for name, _ in documents()])
def test_manifest_runs_real_commands_and_probes_real_endpoints(name, doc, settings):
    parser, known = build_parser(), routes(settings)
    for container in containers(doc):
        command = container["command"]
        assert command[0] == "cockpit"
        parser.parse_args(command[1:])  # exits (fails the test) on an unknown command or option
        for probe in ("readinessProbe", "livenessProbe"):
            if probe in container:
                assert container[probe]["httpGet"]["path"] in known


def test_workers_have_storage_of_their_own_and_web_has_none():
    by_component = {
        doc["metadata"]["labels"]["app.kubernetes.io/component"]: doc
        for _, doc in documents()
        if doc["kind"] == "Deployment"
    }
    worker = by_component["worker"]["spec"]["template"]["spec"]
    [data] = [v for v in worker["volumes"] if v["name"] == "data"]
    assert "ephemeral" in data  # one claim per pod, not one shared claim
    assert "volumes" not in by_component["web"]["spec"]["template"]["spec"]


def compose() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def test_compose_builds_the_image_migrates_first_and_restarts():
    services = compose()["services"]
    cockpit = {name: s for name, s in services.items() if name != "db"}
    assert {"migrate", "web", "worker-1", "worker-2"} <= set(cockpit)
    parser = build_parser()
    for name, service in cockpit.items():
        assert service["build"] == "."
        assert service["restart"] in ("unless-stopped", "on-failure")
        parser.parse_args(service["command"][1:])
        assert service["environment"]["GITHUB_PRIVATE_KEY"].startswith("${GITHUB_PRIVATE_KEY")
        if name != "migrate":
            assert service["depends_on"]["migrate"] == {
                "condition": "service_completed_successfully"
            }
            assert service["healthcheck"]["test"][0] == "CMD-SHELL"
    assert "healthcheck" in services["db"]


def test_compose_gives_each_worker_a_volume_of_its_own():
    services = compose()["services"]
    volumes = [services[name]["volumes"] for name in services if name.startswith("worker-")]
    data = [next(v.split(":")[0] for v in vs if v.endswith(":/data")) for vs in volumes]
    assert len(data) == len(set(data)) >= 2
    assert all("deploy" not in s for s in services.values())  # no replicas sharing one volume
