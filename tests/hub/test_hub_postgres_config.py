"""`hub setup --database-url`, without a server: what the generated files say, and what setup refuses."""

import os
from dataclasses import replace
from pathlib import Path

import pytest

from autograder.hub import cli, database
from autograder.hub.settings import HubError
from autograder.hub.setup.checks import check_database
from autograder.hub.setup.install import keep_database_password, write_course_config
from tests.hub.test_hub_config import load, settings, written

URL = "postgresql://devicelab@db.example.edu:5432/devicelab"


def test_every_part_names_its_schema_and_its_reader_s_password_file_and_no_password(tmp_path: Path) -> None:
    s = written(tmp_path, database_url=URL)
    hub = load(s.paths.config).JupyterHub.db_url
    assert hub == (f"postgresql+psycopg2://devicelab@db.example.edu:5432/devicelab?passfile="
                   f"{s.paths.database_passfile}&options=-csearch_path=jupyterhub")
    gradebook = load(s.paths.grader_etc / "nbgrader_config.py").CourseDirectory.db_url
    assert gradebook.endswith(f"passfile={s.paths.grader_passfile}&options=-csearch_path=gradebook")
    assert database.sibling_part(gradebook, "autograde").endswith("search_path=autograde")
    assert database.schema_of(database.sibling_part(gradebook, "passback")) == "passback"
    s.paths.course.mkdir(parents=True)
    write_course_config(s)
    assert f"c.CourseDirectory.db_url = {gradebook!r}" in (s.paths.course / "nbgrader_config.py").read_text()


def test_without_a_database_url_every_part_keeps_its_sqlite_file(tmp_path: Path) -> None:
    s = written(tmp_path)
    assert load(s.paths.config).JupyterHub.db_url == f"sqlite:///{s.paths.hub / 'jupyterhub.sqlite'}"
    assert (load(s.paths.grader_etc / "nbgrader_config.py").CourseDirectory.db_url
            == f"sqlite:///{s.paths.course / 'gradebook.db'}")
    s.paths.course.mkdir(parents=True)
    write_course_config(s)
    assert "db_url" not in (s.paths.course / "nbgrader_config.py").read_text()
    assert database.course_part_url(s.paths.course, "autograde", tmp_path / "q.sqlite") == \
        f"sqlite:///{tmp_path / 'q.sqlite'}"


@pytest.mark.parametrize(("url", "why"), [
    ("postgresql://devicelab:hunter2@db:5432/devicelab", "must not hold the password"),
    ("mysql://devicelab@db/devicelab", "must be a postgresql://"),
    ("postgresql://db:5432/devicelab", "needs a role, a host and a database"),
    ("postgresql://devicelab@db:5432/devicelab?sslmode=disable", "takes no query"),
])
def test_setup_refuses_a_url_it_cannot_use_safely(tmp_path: Path, url: str, why: str) -> None:
    with pytest.raises(HubError, match=why):
        check_database(settings(tmp_path, database_url=url))


def test_the_password_comes_from_a_private_file_or_the_environment_and_is_kept(tmp_path: Path,
                                                                              monkeypatch) -> None:
    s = settings(tmp_path, database_url=URL)
    monkeypatch.delenv(database.PASSWORD_ENV, raising=False)
    with pytest.raises(HubError, match="needs its password"):
        keep_database_password(s, None)
    loose = tmp_path / "password"
    loose.write_text("s3cret:\\x\n")
    loose.chmod(0o644)
    with pytest.raises(HubError, match="chmod 600"):
        keep_database_password(s, loose)
    loose.chmod(0o600)
    keep_database_password(s, loose)
    assert s.paths.database_passfile.read_text() == "*:*:*:*:s3cret\\:\\\\x\n"
    assert os.stat(s.paths.database_passfile).st_mode & 0o777 == 0o600
    keep_database_password(s, None)  # a second setup without the option keeps it
    assert "s3cret" in s.paths.database_passfile.read_text()
    monkeypatch.setenv(database.PASSWORD_ENV, "from-env")
    keep_database_password(s, None)
    assert s.paths.database_passfile.read_text() == "*:*:*:*:from-env\n"


def test_a_second_setup_keeps_the_database_unless_told_otherwise(tmp_path: Path) -> None:
    s = replace(settings(tmp_path), database_url=URL)
    s.save()
    root = Path(s.root)
    assert cli._database_url(None, root) == URL
    assert cli._database_url("sqlite", root) == ""
    assert cli._database_url(None, tmp_path / "no-hub-yet") == ""
