"""The exchange's backends are named in one place (setup/exchanges.py): every choice of `hub setup
--exchange` is one, each builds the classes it names on both sides (the instructor's commands, the autograde
service's), and each brings its own fragments of the generated configs. Without root or a hub."""

import re
import sys
from dataclasses import replace
from pathlib import Path
from pkgutil import resolve_name

import pytest

from autograder.hub.exchange.choice import autograde_exchange, grading_workers, staff_exchange
from autograder.hub.settings import EXCHANGES, HubError, HubSettings
from autograder.hub.setup.checks import check_settings
from autograder.hub.setup.exchanges import BACKENDS, exchange_setup
from autograder.hub.setup.render import TEMPLATES

ROOT = Path(__file__).resolve().parents[2]
FRAGMENTS = ("spawner.py.j2", "scopes.py.j2", "nbgrader_grader.py.j2", "nbgrader_student.py.j2")


def settings(tmp_path: Path, exchange: str, **changes) -> HubSettings:
    return replace(HubSettings(root=str(tmp_path / "root"), course_id="device-lab", course_source=str(ROOT),
                               prefix="dl-", python=sys.executable, proxy=sys.executable, exchange=exchange),
                   **changes)


def test_every_choice_of_exchange_is_a_backend_and_only_those() -> None:
    assert tuple(BACKENDS) == EXCHANGES
    assert all(name == backend.name for name, backend in BACKENDS.items())


@pytest.mark.parametrize("name", EXCHANGES)
def test_each_backend_builds_the_classes_it_names_on_both_sides(tmp_path: Path, name: str) -> None:
    s = settings(tmp_path, name)
    backend = exchange_setup(s)
    assert type(staff_exchange(s)) is resolve_name(backend.staff)
    built = autograde_exchange(backend.autograde_settings(s))
    assert type(built) is resolve_name(backend.autograde)
    hidden = s.paths.exchange_store if name == "http" else s.paths.exchange
    assert hidden in built.hidden  # the sandbox hides the exchange's files from student code on every backend


def test_the_configs_include_exactly_the_fragments_each_backend_has() -> None:
    included = {m for t in TEMPLATES.glob("*.j2")
                for m in re.findall(r'exchange\.templates ~ "/([^"]+)"', t.read_text(encoding="utf-8"))}
    assert included == set(FRAGMENTS)
    for backend in BACKENDS.values():
        for fragment in FRAGMENTS:
            assert (TEMPLATES / backend.templates / fragment).is_file(), (backend.name, fragment)


def test_only_a_backend_that_hands_work_out_gets_grading_workers(tmp_path: Path) -> None:
    files = settings(tmp_path, "files", grading_workers=2)
    with pytest.raises(HubError, match="--grading-workers 2 needs --exchange http"):
        check_settings(files)
    assert exchange_setup(files).workers(files) == []
    with pytest.raises(TypeError, match="FolderAutograde"):
        grading_workers(autograde_exchange(exchange_setup(files).autograde_settings(files)))
    http = settings(tmp_path, "http", grading_workers=2)
    workers = exchange_setup(http).workers(http)
    assert [p.service for p in workers] == ["device-lab-worker-1", "device-lab-worker-2"]
    assert grading_workers(autograde_exchange(exchange_setup(http).autograde_settings(http))).where


def test_the_autograde_service_refuses_settings_that_contradict_their_backend(tmp_path: Path) -> None:
    from autograder.hub.part_settings import AutogradeSettings

    files = settings(tmp_path, "files")
    told = exchange_setup(files).autograde_settings(files)
    for wrong in (replace(told, http_exchange="http://127.0.0.1:9/"), replace(told, workers=True),
                  replace(told, backend="http")):
        with pytest.raises(ValueError, match="only it, needs the exchange service's address"):
            autograde_exchange(wrong)
    with pytest.raises(TypeError):  # the backend is named, never guessed (an old config file lacks it)
        AutogradeSettings(course="c", exchange="e", course_id="x")
