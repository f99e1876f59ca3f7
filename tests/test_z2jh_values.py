"""docs/hub/z2jh-values.yaml, the Kubernetes path (not run here: no cluster), stays honest: it is validated as
Helm validates it (the chart's defaults merged with it, against the chart's values schema) for the chart
version it names, and the single-user image installs that chart's JupyterHub version."""

import re

import jsonschema
import pytest
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
