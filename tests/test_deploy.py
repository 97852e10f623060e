"""The operator's files: Kubernetes manifests valid against Kubernetes' own JSON schemas
(kubernetes-validate ships them), and both they and compose.yaml naming what the product has:
its commands, its health endpoints, a volume per worker."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
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


def pod_specs() -> dict[str, dict]:
    """Each role's pod spec (web, worker, migrate), from the Deployments and the Job."""
    return {
        doc["metadata"]["labels"]["app.kubernetes.io/component"]: doc["spec"]["template"]["spec"]
        for _, doc in documents()
        if doc["kind"] in ("Deployment", "Job")
    }


def test_workers_have_storage_of_their_own_and_web_has_none():
    pods = pod_specs()
    [data] = [v for v in pods["worker"]["volumes"] if v["name"] == "data"]
    assert "ephemeral" in data  # one claim per pod, not one shared claim
    assert all(set(v) == {"name", "emptyDir"} for v in pods["web"]["volumes"])  # scratch only


# -- the "restricted" Pod Security Standard ------------------------------------------------
# Written from the profile's rules (Kubernetes docs, "Pod Security Standards", v1.30): the
# baseline's, then the restricted's own. A pod-level field counts for every container.

ALLOWED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}  # fmt: skip
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}  # fmt: skip
SELINUX_TYPES = {
    None,
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
}


def restricted_violations(pod: dict) -> list[str]:
    """What keeps `pod` (a pod spec) from the restricted Pod Security Standard."""
    found = []
    context = pod.get("securityContext") or {}
    every = [
        *pod.get("containers", []), *pod.get("initContainers", []),
        *pod.get("ephemeralContainers", []),
    ]  # fmt: skip
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            found.append(field)
    for volume in pod.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= ALLOWED_VOLUMES:
            found.append(f"volume {volume['name']}: {sorted(kinds)}")
    for sysctl in context.get("sysctls", []):
        if sysctl["name"] not in SAFE_SYSCTLS:
            found.append(f"sysctl {sysctl['name']}")
    for container in every:
        name, own = container["name"], container.get("securityContext") or {}

        def setting(key: str, own=own):  # the container's, else the pod's
            return own[key] if key in own else context.get(key)

        if own.get("privileged"):
            found.append(f"{name}: privileged")
        if (setting("windowsOptions") or {}).get("hostProcess"):
            found.append(f"{name}: hostProcess")
        if any(port.get("hostPort") for port in container.get("ports", [])):
            found.append(f"{name}: hostPort")
        if own.get("procMount", "Default") != "Default":
            found.append(f"{name}: procMount")
        if (setting("appArmorProfile") or {}).get("type") == "Unconfined":
            found.append(f"{name}: AppArmor unconfined")
        selinux = setting("seLinuxOptions") or {}
        if selinux.get("type") not in SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
            found.append(f"{name}: seLinuxOptions")
        if own.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation is not false")
        if setting("runAsNonRoot") is not True:
            found.append(f"{name}: runAsNonRoot is not true")
        if setting("runAsUser") == 0:
            found.append(f"{name}: runAsUser 0")
        if (setting("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost"):
            found.append(f"{name}: seccompProfile is not RuntimeDefault or Localhost")
        capabilities = own.get("capabilities") or {}
        if "ALL" not in capabilities.get("drop", []):
            found.append(f"{name}: capabilities do not drop ALL")
        if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            found.append(f"{name}: capabilities add {capabilities['add']}")
    return found


RESTRICTED_POD = {
    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [
        {
            "name": "c",
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
            },
        }
    ],
}


def changed(path: str, value) -> dict:
    """RESTRICTED_POD with one field set (`a.b.0.c` walks dicts and lists)."""
    pod = copy.deepcopy(RESTRICTED_POD)
    *parents, last = path.split(".")
    node = pod
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    node[last] = value
    return pod


@pytest.mark.parametrize(
    ("pod", "violation"),
    [
        (RESTRICTED_POD, None),
        (changed("hostNetwork", True), "hostNetwork"),
        (changed("volumes", [{"name": "h", "hostPath": {"path": "/"}}]), "volume h"),
        (changed("containers.0.securityContext.privileged", True), "privileged"),
        (changed("containers.0.securityContext.allowPrivilegeEscalation", True), "Escalation"),
        (changed("securityContext.runAsNonRoot", False), "runAsNonRoot"),
        (changed("containers.0.securityContext.runAsNonRoot", False), "runAsNonRoot"),
        (changed("containers.0.securityContext.runAsUser", 0), "runAsUser 0"),
        (changed("securityContext.seccompProfile", {"type": "Unconfined"}), "seccompProfile"),
        (changed("containers.0.securityContext.capabilities", {"drop": ["NET_RAW"]}), "ALL"),
        (changed("containers.0.securityContext.capabilities.add", ["SYS_ADMIN"]), "add"),
        (changed("containers.0.ports", [{"containerPort": 80, "hostPort": 80}]), "hostPort"),
        (changed("securityContext.sysctls", [{"name": "kernel.msgmax", "value": "1"}]), "sysctl"),
    ],
)
def test_the_restricted_check_finds_each_rule_broken(pod, violation):
    found = restricted_violations(pod)
    assert found == [] if violation is None else any(violation in f for f in found), found


@pytest.mark.parametrize("role", ["web", "worker", "migrate"])
def test_every_pod_meets_the_restricted_pod_security_standard(role):
    pod = pod_specs()[role]
    assert restricted_violations(pod) == []
    assert pod.get("automountServiceAccountToken") is False  # none calls the Kubernetes API


@pytest.mark.parametrize("role", ["web", "worker", "migrate"])
def test_root_filesystems_are_read_only_with_scratch_where_the_process_writes(role):
    pod = pod_specs()[role]
    volumes = {v["name"]: v for v in pod["volumes"]}
    for container in pod["containers"]:
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
        assert "emptyDir" in mounts["/tmp"]  # Python's and git's temporary files
        if role != "migrate":  # COCKPIT_DATA_DIR (the image's /data): serve checks it is writable
            assert "/data" in mounts and not mounts["/data"].get("readOnly")


# -- each role gets the secrets it reads, no more ------------------------------------------

# What each role reads of the Secret, from the code: `web` verifies and stores deliveries
# (bot.config.ROLE_GITHUB["web"]: the webhook secret; and the database); a worker calls
# GitHub as the App and the models; the migration needs the database.
ROLE_SECRETS = {
    "web": {"GITHUB_WEBHOOK_SECRET", "COCKPIT_DATABASE_URL", "COCKPIT_METRICS_TOKEN"},
    "worker": {
        "GITHUB_APP_ID", "GITHUB_APP_SLUG", "GITHUB_PRIVATE_KEY", "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY", "COCKPIT_CHAT_API_KEY", "COCKPIT_DATABASE_URL", "COCKPIT_METRICS_TOKEN",
    },
    "migrate": {"COCKPIT_DATABASE_URL"},
}  # fmt: skip
MODEL_KEYS = {"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY", "COCKPIT_CHAT_API_KEY"}


def secret_refs(container: dict) -> dict[str, dict]:
    """The Secret's keys a container gets, by variable name (with whether each is optional)."""
    assert not any("secretRef" in source for source in container.get("envFrom", [])), (
        "a whole Secret in the environment"
    )
    return {
        item["name"]: item["valueFrom"]["secretKeyRef"]
        for item in container.get("env", [])
        if "secretKeyRef" in item.get("valueFrom", {})
    }


def test_the_role_settings_match_the_code():
    from bot.config import ROLE_GITHUB

    assert ROLE_GITHUB["web"] == ("webhook_secret",)
    assert set(ROLE_GITHUB["worker"]) == {"app_id", "private_key"}


@pytest.mark.parametrize("role", ["web", "worker", "migrate"])
def test_each_pod_gets_only_the_secrets_its_role_reads(role):
    [container] = pod_specs()[role]["containers"]
    refs = secret_refs(container)
    assert set(refs) == ROLE_SECRETS[role]
    assert all(ref["key"] == name for name, ref in refs.items())
    if role == "worker":
        assert "GITHUB_WEBHOOK_SECRET" not in refs
        assert all(refs[key].get("optional") for key in MODEL_KEYS & set(refs))
    secret = next(doc for _, doc in documents() if doc["kind"] == "Secret")
    assert {ref["key"] for ref in refs.values() if not ref.get("optional")} <= set(
        secret["stringData"]
    )


@pytest.mark.parametrize("role", ["web", "worker"])
def test_the_metrics_token_reaches_every_pod_that_serves_metrics(role, settings):
    """Before: no pod got COCKPIT_METRICS_TOKEN, so /metrics stayed open whatever the Secret
    held. Both roles serve /metrics; the token is optional, and secret.yaml shows where it
    goes (commented out: a shipped placeholder would be a token anyone knows)."""
    assert "/metrics" in {
        r.canonical for r in make_app(settings, router, role=role).router.resources()
    }
    [container] = pod_specs()[role]["containers"]
    ref = secret_refs(container)["COCKPIT_METRICS_TOKEN"]
    assert ref == {"name": "pr-cockpit", "key": "COCKPIT_METRICS_TOKEN", "optional": True}
    example = (ROOT / "deploy/kubernetes/secret.yaml").read_text()
    assert re.search(r"^  # COCKPIT_METRICS_TOKEN: \S+$", example, re.M)


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
        if name.startswith("worker-"):
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


def manifest_env(role: str, secret: dict[str, str], config: dict[str, str]) -> dict[str, str]:
    """The environment Kubernetes gives the role's container: its ConfigMap (`config`), its
    literal values, and the keys it names of the Secret (`secret`; an optional one that is
    absent is left out, as Kubernetes does)."""
    [container] = pod_specs()[role]["containers"]
    env = {}
    for source in container.get("envFrom", []):
        assert "configMapRef" in source
        env.update(config)
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
            continue
        ref = item["valueFrom"]["secretKeyRef"]
        if ref["key"] in secret:
            env[item["name"]] = secret[ref["key"]]
        else:
            assert ref.get("optional"), f"{role} needs {ref['key']}, which is not in the Secret"
    return env


def pg_count(url: str, sql: str) -> list[tuple]:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchall()


async def test_each_role_runs_with_only_what_its_manifest_gives_it(pg_cluster, github, tmp_path):
    """The migration, a web and a worker process started with exactly the environment their
    manifests give them (the Secret's values are the stand-ins'): the schema is applied, the
    web process (no App key, no model key) verifies and stores a delivery, and the worker
    (no webhook secret) takes it from there."""
    import aiohttp

    from tests import deliveries
    from tests.conftest import WEBHOOK_SECRET, wait_for
    from tests.serverproc import ServerProcess

    url = pg_cluster.create_database()
    secret = {
        "GITHUB_APP_ID": github.app_id,
        "GITHUB_APP_SLUG": github.slug,
        "GITHUB_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "GITHUB_PRIVATE_KEY": github.private_key_pem,
        "ANTHROPIC_API_KEY": "sk-ant-test-key-0123456789",
        "COCKPIT_DATABASE_URL": url,
    }
    config = {"COCKPIT_PROVIDER": "claude", "GITHUB_API_URL": github.url}
    web_env = manifest_env("web", secret, config)
    assert not {"GITHUB_PRIVATE_KEY", "GITHUB_APP_ID", "ANTHROPIC_API_KEY"} & set(web_env)
    worker_env = manifest_env("worker", secret, config)
    assert "GITHUB_WEBHOOK_SECRET" not in worker_env

    migrate = subprocess.run(
        [sys.executable, "-m", "bot", "migrate"],
        env={"PATH": "/usr/bin:/bin", **manifest_env("migrate", secret, config)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert migrate.returncode == 0, migrate.stderr

    web = ServerProcess(web_env, tmp_path / "web", tmp_path / "web.log", role="web")
    worker = ServerProcess(worker_env, tmp_path / "worker", tmp_path / "worker.log", role="worker")
    try:
        await web.start()
        data = deliveries.payload("pull_request.opened")
        data["sender"] = {"login": "renovate[bot]", "id": 2, "type": "Bot"}  # routed, ignored
        body = json.dumps(data).encode()
        headers = deliveries.headers("pull_request", body, WEBHOOK_SECRET, "role-1")
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{web.url}/webhooks/github", data=body, headers=headers) as response,
        ):
            assert response.status == 202, await response.text()
        assert pg_count(url, "SELECT status FROM deliveries") == [("queued",)]
        await worker.start()
        await wait_for(
            lambda: pg_count(url, "SELECT status FROM deliveries") == [("ignored",)], timeout=30
        )
    finally:
        web.terminate()
        worker.terminate()


def compose_env(service: dict, env_file: dict[str, str], shell: dict[str, str]) -> dict[str, str]:
    """The environment compose gives a service: its env_file, then its `environment` with
    `${VAR}`, `${VAR:-default}` and `${VAR:?message}` taken from `shell`."""

    def interpolate(value: str) -> str:
        def one(match: re.Match) -> str:
            name, how, rest = match.group(1), match.group(2) or "", match.group(3) or ""
            if shell.get(name):
                return shell[name]
            assert how != ":?", f"compose refuses to start without {name}: {rest}"
            return rest

        return re.sub(r"\$\{(\w+)(:-|:\?)?([^}]*)\}", one, value)

    env = dict(env_file) if service.get("env_file") else {}
    env.update({k: interpolate(str(v)) for k, v in (service.get("environment") or {}).items()})
    return {k: v for k, v in env.items() if v != ""}  # a blanked variable reads as unset


def test_compose_gives_each_role_only_the_secrets_it_reads():
    """cockpit.env (as `cockpit register` writes it, plus a model key) is not every role's:
    web gets its webhook secret and the database, the workers the App's key and the model
    keys but not the webhook secret, the migration the database only."""
    env_file = {
        "GITHUB_APP_ID": "12",
        "GITHUB_APP_SLUG": "cockpit",
        "GITHUB_WEBHOOK_SECRET": "from-register",
        "GITHUB_PRIVATE_KEY_PATH": "/home/me/cockpit.private-key.pem",
        "ANTHROPIC_API_KEY": "sk-ant-key",
        "OPENAI_API_KEY": "sk-key",
    }
    shell = {"GITHUB_PRIVATE_KEY": "-----BEGIN…", "POSTGRES_PASSWORD": "pg-secret"}
    services = compose()["services"]
    envs = {name: compose_env(services[name], env_file, shell) for name in services}
    assert set(envs["migrate"]) == {"COCKPIT_DATABASE_URL"}
    assert "pg-secret" in envs["migrate"]["COCKPIT_DATABASE_URL"]
    assert {"GITHUB_WEBHOOK_SECRET", "COCKPIT_DATABASE_URL"} <= set(envs["web"])
    assert not (MODEL_KEYS | {"GITHUB_PRIVATE_KEY"}) & set(envs["web"])
    for name in ("worker-1", "worker-2"):
        assert {"GITHUB_PRIVATE_KEY", "ANTHROPIC_API_KEY", "OPENAI_API_KEY"} <= set(envs[name])
        assert "GITHUB_WEBHOOK_SECRET" not in envs[name]
    with pytest.raises(AssertionError, match="POSTGRES_PASSWORD"):  # no default password
        compose_env(services["db"], env_file, {})
