"""Two distributions from one repository: the course (pyproject.toml, the student package only) and the grader
with the hub (grader/pyproject.toml), whose entry points are what the hub's parts and JupyterHub run."""

import importlib
import re
from pathlib import Path

import pytest

from autograder.hub import settings
from autograder.hub.settings import HubSettings

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
COURSE = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
GRADER = tomllib.loads((ROOT / "grader" / "pyproject.toml").read_text(encoding="utf-8"))
ENTRY_POINTS = {**GRADER["project"]["scripts"],
                **{name: target for group in GRADER["project"]["entry-points"].values()
                   for name, target in group.items()}}


def test_the_course_distribution_carries_the_student_package_only():
    assert COURSE["tool"]["setuptools"]["packages"]["find"]["include"] == ["devicelab*"]
    wheel = GRADER["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel["force-include"] == {"../autograder": "autograder"}
    assert GRADER["project"]["dependencies"] == [f"devicelab[instructor]=={COURSE['project']['version']}"]


def test_the_commands_the_hub_runs_are_the_ones_the_grader_installs():
    assert sorted(settings.COMMANDS) == sorted(GRADER["project"]["scripts"])
    plugins = GRADER["project"]["entry-points"]
    assert settings.SPAWNER in plugins["jupyterhub.spawners"]
    assert settings.LTI_AUTHENTICATOR in plugins["jupyterhub.authenticators"]


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_each_entry_point_names_something_that_exists(name):
    module, _, attribute = ENTRY_POINTS[name].partition(":")
    assert callable(getattr(importlib.import_module(module), attribute))


def test_a_command_runs_from_the_hubs_environment_by_absolute_path():
    s = HubSettings(root="/srv/hub", course_id="c", course_source="/src", python="/opt/lab/bin/python")
    assert s.command(settings.AUTOGRADE) == "/opt/lab/bin/devicelab-autograde"


def test_no_template_edits_sys_path_or_sets_pythonpath():
    templates = sorted((ROOT / "autograder/hub/setup/templates").glob("*.j2"))
    assert templates
    edits = [t.name for t in templates if re.search(r"sys\.path|PYTHONPATH", t.read_text(encoding="utf-8"))]
    assert edits == []


def test_the_developers_editable_install_runs_the_checkout_from_any_folder(tmp_path: Path):
    """hatchling copies force-included files into editable wheels too: a copy of autograder/ in site-packages
    would shadow the checkout for every hub part started outside it (grader/hatch_build.py stops that)."""
    import subprocess
    import sys

    found = subprocess.run([sys.executable, "-c", "import autograder; print(autograder.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(found) == ROOT / "autograder" / "__init__.py"
