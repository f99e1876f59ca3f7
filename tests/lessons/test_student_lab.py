"""`make lab` opens the course as a student sees it: none of nbgrader's instructor tools; `make
lab-instructor` has them.
"""

import ast
import json
import os
import subprocess
import sys

from autograder import COURSE_ROOT

STUDENT_CONFIG = COURSE_ROOT / "etc" / "jupyter" / "student"
INSTRUCTOR_TOOLS = ("formgrader", "create-assignment", "validate-assignment", "course-list")

PROBE = """
from jupyter_server.serverapp import ServerApp
app = ServerApp()
app.initialize(argv=["--no-browser", "--port=0"], find_extensions=True, new_httpserver=False)
print(sorted(n for n, e in app.extension_manager.extensions.items() if e.enabled and n.startswith("nbgrader")))
"""  # noqa: E501 (the probe's source)


def enabled_nbgrader_server_extensions(extra_config_path: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "JUPYTER_CONFIG_PATH"}
    if extra_config_path:
        env["JUPYTER_CONFIG_PATH"] = extra_config_path
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120,
                          check=True)
    return ast.literal_eval(done.stdout.strip().splitlines()[-1])  # the printed list of names


def test_the_students_lab_has_no_nbgrader_server_extension_and_the_instructors_has_formgrader():
    assert enabled_nbgrader_server_extensions(str(STUDENT_CONFIG)) == []
    assert "nbgrader.server_extensions.formgrader" in enabled_nbgrader_server_extensions(None)


def test_the_students_lab_hides_nbgraders_instructor_panels_and_buttons():
    disabled = json.loads((STUDENT_CONFIG / "labconfig" / "page_config.json").read_text())[
        "disabledExtensions"]
    for tool in INSTRUCTOR_TOOLS:
        assert disabled.get(f"@jupyter/nbgrader:{tool}") is True, tool


def test_make_lab_uses_the_student_config_and_lab_instructor_does_not():
    makefile = (COURSE_ROOT / "Makefile").read_text()
    student, instructor = makefile.split("\nlab:", 1)[1], makefile.split("\nlab-instructor:", 1)[1]
    assert "JUPYTER_CONFIG_PATH=\"$(STUDENT_JUPYTER)\"" in student.split("\n\n")[0]
    assert "JUPYTER_CONFIG_PATH" not in instructor.split("\n\n")[0]
    assert "STUDENT_JUPYTER := $(CURDIR)/etc/jupyter/student" in makefile


def test_make_lab_installs_the_course_alone_and_opens_the_students_own_copies():
    """A student's `make lab` installs the `course` extra (JupyterLab and what the lessons need, never the
    grader, the hub, the book or the test tools) and opens mywork/, never the tracked notebooks."""
    from tests.test_dependencies import declared, tomllib

    makefile = (COURSE_ROOT / "Makefile").read_text()
    lab = makefile.split("\nlab:", 1)[1].split("\n\n")[0]
    assert lab.startswith(" $(COURSE_STAMP)"), lab
    course_install = subprocess.run(["make", "--dry-run", "--always-make", ".venv/.course-stamp"],
                                    cwd=COURSE_ROOT, capture_output=True, text=True, check=True).stdout
    assert '-e ".[course]"' in course_install and "[dev]" not in course_install, course_install
    assert "devicelab workspace" in lab and '--notebook-dir="$(CURDIR)/$(MYWORK)"' in lab
    assert "\nMYWORK ?= mywork\n" in makefile and "mywork/" in (COURSE_ROOT / ".gitignore").read_text()
    student = declared(["course"])
    assert {"jupyterlab", "ipykernel", "torch"} <= student
    staff = {"nbgrader", "jupyterhub", "pytest", "sphinx", "psycopg2-binary", "playwright", "ruff",
             "jupyterhub-kubespawner", "pylti1p3"}
    assert not student & staff, student & staff
    extras = tomllib.loads((COURSE_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "devicelab[course]" in extras["instructor"]
