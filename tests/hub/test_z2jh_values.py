"""docs/hub/z2jh-values.yaml, the Kubernetes path (not run here: no cluster), stays honest: it is validated as
Helm validates it (the chart's defaults merged with it, against the chart's values schema) for the chart
version it names, and the single-user image installs that chart's JupyterHub version."""

import re

import jsonschema
import pytest
import tomllib
import yaml

from autograder import COURSE_ROOT

HUB_DOCS = COURSE_ROOT / "docs" / "hub"
VALUES = HUB_DOCS / "z2jh-values.yaml"


def chart_version() -> str:
    """The chart version the values file is written for (its `helm ... --version`)."""
    found = re.search(r"jupyterhub/jupyterhub --version (\S+)", VALUES.read_text())
    assert found, "the values file names the chart version it is written for"
    return found.group(1)


def load(name: str):
    return yaml.safe_load((HUB_DOCS / "z2jh" / name).read_text())


def merged(defaults, values):
    """Helm's merge of a chart's defaults with user values: maps merge key by key, anything else replaces."""
    if isinstance(defaults, dict) and isinstance(values, dict):
        return {**defaults, **{k: merged(defaults[k], v) if k in defaults else v for k, v in values.items()}}
    return values


def problems(values) -> list[str]:
    version = chart_version()
    schema = load(f"values.schema-{version}.yaml")
    found = jsonschema.Draft7Validator(schema).iter_errors(merged(load(f"values-{version}.yaml"), values))
    return [f"{'.'.join(map(str, e.path))}: {e.message}" for e in found]


def test_the_values_validate_against_the_schema_of_the_chart_they_name():
    assert (HUB_DOCS / "z2jh" / f"Chart-{chart_version()}.yaml").exists()
    assert load(f"Chart-{chart_version()}.yaml")["version"] == chart_version()
    assert problems(yaml.safe_load(VALUES.read_text())) == []


@pytest.mark.parametrize(("path", "value"), [
    (("hub", "confg"), {}),  # a misspelt key
    (("singleuser", "memory", "limit"), ["3G"]),  # a wrong type
    (("proxy", "service", "type"), "Balancer"),  # not one of the allowed values
])
def test_the_validation_catches_mistakes(path, value):
    values = yaml.safe_load(VALUES.read_text())
    place = values
    for key in path[:-1]:
        place = place.setdefault(key, {})
    place[path[-1]] = value
    assert problems(values), f"{'.'.join(path)} = {value!r} should be refused"


def test_the_single_user_image_runs_the_jupyterhub_of_the_chart_s_hub():
    app_version = load(f"Chart-{chart_version()}.yaml")["appVersion"]
    pinned = re.findall(r'"jupyterhub==([^"]+)"', (HUB_DOCS / "singleuser.Dockerfile").read_text())
    assert pinned == [app_version]
    image = yaml.safe_load(VALUES.read_text())["singleuser"]["image"]
    assert image["name"] in (HUB_DOCS / "singleuser.Dockerfile").read_text()


# The pods: what KubeSpawner makes of the values, and the grader's and exchange's Deployments

# The KubeSpawner settings the chart's hub (its jupyterhub_config.py) gives for each `singleuser` key this
# file uses; a key not listed here fails the test below rather than being left out of the pod unchecked.
SPAWNER_TRAITS = {"uid": "uid", "fsGid": "fs_gid", "allowPrivilegeEscalation": "allow_privilege_escalation",
                  "extraEnv": "environment", "extraPodConfig": "extra_pod_config"}
SPAWNER_KEYS = {*SPAWNER_TRAITS, "image", "defaultUrl", "memory", "cpu", "extraFiles", "storage",
                "networkPolicy"}  # networkPolicy: a NetworkPolicy object of the chart's, not the pod


def spawner_config(values: dict):
    """Return the KubeSpawner configuration the chart makes of the merged values, then `hub.extraConfig`."""
    from traitlets.config import Config

    user = values["singleuser"]
    unknown = set(yaml.safe_load(VALUES.read_text())["singleuser"]) - SPAWNER_KEYS
    assert not unknown, f"singleuser keys this test does not turn into KubeSpawner settings: {unknown}"
    c = Config()
    k = c.KubeSpawner
    for key, trait in SPAWNER_TRAITS.items():
        if user.get(key) is not None:
            k[trait] = user[key]
    k.image = f"{user['image']['name']}:{user['image']['tag']}"
    c.Spawner.default_url = user["defaultUrl"]
    k.mem_limit, k.mem_guarantee = user["memory"]["limit"], user["memory"]["guarantee"]
    k.cpu_limit, k.cpu_guarantee = user["cpu"]["limit"], user["cpu"]["guarantee"]
    storage = user["storage"]
    assert storage["type"] == "dynamic"
    volume = storage["dynamic"]["volumeNameTemplate"]
    k.volumes = [{"name": volume, "persistentVolumeClaim": {"claimName": "claim-{username}{servername}"}}]
    k.volume_mounts = [{"mountPath": storage["homeMountPath"], "name": volume}]
    files = user.get("extraFiles") or {}
    if files:
        k.volumes.append({"name": "files", "secret": {"secretName": "singleuser",
                                                      "items": [{"key": f, "path": f} for f in files]}})
        k.volume_mounts.extend({"mountPath": d["mountPath"], "subPath": f, "name": "files"}
                               for f, d in files.items())
    k.volumes.extend(storage.get("extraVolumes") or [])
    k.volume_mounts.extend(storage.get("extraVolumeMounts") or [])
    for snippet in values["hub"].get("extraConfig", {}).values():
        exec(compile(snippet, "hub.extraConfig", "exec"), {"c": c, "get_config": lambda: c})
    return c


@pytest.fixture
def kubeconfig(tmp_path, monkeypatch):
    """A kubeconfig naming an API server that is not there: KubeSpawner starts, and nothing calls it."""
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "none",
        "clusters": [{"name": "none", "cluster": {"server": "https://127.0.0.1:9"}}],
        "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}],
        "users": [{"name": "none", "user": {"token": "not-a-token"}}]}))
    from kubernetes_asyncio.config import kube_config

    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))  # read once, at import
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


def student_pod(values: dict) -> dict:
    """Return the pod manifest KubeSpawner makes for the student ann from the values (no API call made)."""
    import asyncio

    from kubernetes_asyncio.client import ApiClient
    from kubespawner import KubeSpawner

    async def make() -> dict:
        spawner = KubeSpawner(config=spawner_config(values), _mock=True)  # in a loop, as in the hub
        spawner.user.name = "ann"
        spawner.api_token = "a-token-of-ann-s"
        spawner.pod_name = spawner._expand_user_properties(spawner.pod_name_template)
        return ApiClient().sanitize_for_serialization(await spawner.get_pod_manifest())

    return asyncio.run(make())


def test_a_student_pod_runs_unprivileged_with_the_http_exchange_and_no_shared_volume(kubeconfig):
    values = merged(load(f"values-{chart_version()}.yaml"), yaml.safe_load(VALUES.read_text()))
    pod = student_pod(values)
    (container,) = pod["spec"]["containers"]
    assert pod["spec"]["securityContext"]["fsGroup"] == 100
    assert container["securityContext"]["runAsUser"] == 1000
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["image"] == "ghcr.io/devicelab-course/device-lab-singleuser:2026.11"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["JUPYTERHUB_API_TOKEN"] == "a-token-of-ann-s" and env["JUPYTERHUB_USER"] == "ann"
    assert not [name for name in env if "EXCHANGE" in name or name.startswith("PG")]
    # One volume of the student's own (the home), the chart's files, and nothing shared with anyone
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]
              if "persistentVolumeClaim" in v]
    assert claims == ["claim-ann"], claims
    assert {v["name"] for v in pod["spec"]["volumes"]} == {"volume-ann", "files"}
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {"/home/jovyan", "/etc/jupyter/nbgrader_config.py",
                      "/etc/jupyter/jupyter_server_config.py"}


def test_the_students_nbgrader_uses_the_exchange_service_classes_that_exist():
    import importlib

    from traitlets.config import Config

    source = yaml.safe_load(VALUES.read_text())["singleuser"]["extraFiles"]["nbgrader-config"]["stringData"]
    c = Config()
    exec(compile(source, "nbgrader_config.py", "exec"), {"get_config": lambda: c})
    factory = c.ExchangeFactory
    assert set(factory) == {"exchange", "fetch_assignment", "fetch_feedback", "submit", "list",
                            "release_assignment", "release_feedback", "collect"}
    for path in factory.values():
        module, name = path.rsplit(".", 1)
        assert hasattr(importlib.import_module(module), name), path
    assert "Exchange" not in c or "root" not in c.Exchange, "a shared exchange folder is configured"
    assert c.HttpExchange.url.startswith("http://device-lab-exchange:")


def test_the_hub_keeps_its_database_in_postgresql_without_a_password_in_the_values():
    values = yaml.safe_load(VALUES.read_text())
    db = values["hub"]["db"]
    assert db["type"] == "other" and "password" not in db
    assert db["url"].startswith("postgresql+psycopg2://devicelab@"), "no password in the URL"
    assert "search_path%3Djupyterhub" in db["url"]
    secret = values["hub"]["extraEnv"]["PGPASSWORD"]["valueFrom"]["secretKeyRef"]
    assert secret["name"] == "devicelab-database"
    assert "device-lab-exchange" in values["hub"]["services"]
    text = VALUES.read_text() + (HUB_DOCS / "z2jh" / "grading.yaml").read_text()
    assert "nbgrader-exchange" not in text and "ReadWriteMany" not in text


def manifests() -> list[dict]:
    return list(yaml.safe_load_all((HUB_DOCS / "z2jh" / "grading.yaml").read_text()))


def unknown_fields(data, model: str, path: str = "") -> list[str]:
    """Return the fields of a manifest that the Kubernetes API's model (kubernetes_asyncio's) lacks."""
    import re as _re

    import kubernetes_asyncio.client as k8s

    if model.startswith("list["):
        return [p for i, item in enumerate(data) for p in unknown_fields(item, model[5:-1], f"{path}[{i}]")]
    if model.startswith("dict(") or not hasattr(k8s, model):
        return []
    cls = getattr(k8s, model)
    by_json = {v: k for k, v in cls.attribute_map.items()}
    found = []
    for key, value in data.items():
        if key not in by_json:
            found.append(f"{path}.{key}")
        else:
            found += unknown_fields(value, _re.sub(r"^object$", "", cls.openapi_types[by_json[key]]),
                                    f"{path}.{key}")
    return found


def test_the_grading_and_exchange_manifests_use_only_fields_kubernetes_has():
    kinds = {"Deployment": "V1Deployment", "Service": "V1Service", "ConfigMap": "V1ConfigMap"}
    for doc in manifests():
        assert unknown_fields(doc, kinds[doc["kind"]], doc["metadata"]["name"]) == []
    assert unknown_fields({"spec": {"hostUsrs": False}}, "V1Deployment") == [".spec.hostUsrs"]  # it can fail


def test_the_grading_pod_lets_bubblewrap_make_its_namespaces_and_refuses_to_grade_unsandboxed():
    grader = next(d for d in manifests() if d["metadata"]["name"] == "device-lab-grader"
                  and d["kind"] == "Deployment")
    spec = grader["spec"]["template"]["spec"]
    assert spec["hostUsers"] is False and spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"]["type"] == "Unconfined"
    assert spec["securityContext"]["appArmorProfile"]["type"] == "Unconfined"
    (container,) = spec["containers"]
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "procMount": "Unmasked",
                                            "capabilities": {"drop": ["ALL"]}}
    text = (HUB_DOCS / "z2jh" / "grading.yaml").read_text()
    assert "--sandbox bwrap" in text
    assert not re.search(r"^\s*(command|args):.*--sandbox\W+none", text, re.MULTILINE)
    exchange = next(d for d in manifests() if d["metadata"]["name"] == "device-lab-exchange"
                    and d["kind"] == "Deployment")
    (box,) = exchange["spec"]["template"]["spec"]["containers"]
    # the image installs the grader distribution (docs/hub/singleuser.Dockerfile): the service is its command
    assert box["command"][0] == "devicelab-exchange-service"
    assert "devicelab-grader @" in (HUB_DOCS / "singleuser.Dockerfile").read_text()
    assert "PYTHONPATH" not in (HUB_DOCS / "singleuser.Dockerfile").read_text()
    scripts = tomllib.loads((COURSE_ROOT / "grader" / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts[box["command"][0]] == "autograder.hub.exchange.http.service:main"
