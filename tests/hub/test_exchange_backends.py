"""The exchange's backends are named in one place (setup/exchanges.py): every choice of `hub setup
--exchange` is one, each builds the classes it names on both sides (the instructor's commands, the autograde
service's), and each brings its own fragments of the generated configs. Without root or a hub."""

import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from traitlets.utils.importstring import import_item

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
    assert type(staff_exchange(s)) is import_item(backend.staff)
    built = autograde_exchange(backend.autograde_settings(s))
    assert type(built) is import_item(backend.autograde)
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
