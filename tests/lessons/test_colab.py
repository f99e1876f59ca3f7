"""Colab: every student notebook opens there, sets itself up, and runs in a Colab-shaped environment."""

import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import nbformat
import pytest

from autograder import COURSE_ROOT
from autograder.colab_cells import (
    BADGE_PAGE,
    BADGE_TAG,
    COLAB_METADATA,
    SETUP_TAG,
    load_repository,
    setup_source,
)
from autograder.course import assignment_notebooks, assignments, lessons
from autograder.grading.demo import solved
from book.execution import execute_notebook

REPO = load_repository(COURSE_ROOT)
RELEASES = [nb for a in assignments() for nb in assignment_notebooks(a, folder="release")]
STUDENT_NOTEBOOKS = lessons() + RELEASES
COLAB_VENV = COURSE_ROOT / ".colab-venv"


def _rel(path: Path) -> str:
    return path.relative_to(COURSE_ROOT).as_posix()


@pytest.mark.parametrize("path", STUDENT_NOTEBOOKS, ids=_rel)
def test_notebook_opens_on_colab_with_a_gpu_and_sets_itself_up(path):
    nb = nbformat.read(path, as_version=4)
    badge, setup = nb.cells[0], nb.cells[1]
    assert BADGE_TAG in badge.metadata.get("tags",
                                           []), "the first cell is the Open-in-Colab badge (run make build)"
    assert REPO.colab_url(_rel(path)) in badge.source, "the badge opens this very notebook"
    assert SETUP_TAG in setup.metadata.get("tags", []) and setup.source == setup_source(REPO)
    for key, value in COLAB_METADATA.items():
        assert nb.metadata.get(key) == value, "notebook metadata asks Colab for a GPU runtime"


def test_the_students_guide_has_a_badge_for_every_student_notebook():
    guide = (COURSE_ROOT / BADGE_PAGE).read_text()
    for path in STUDENT_NOTEBOOKS:
        assert REPO.colab_url(_rel(path)) in guide, (f"{BADGE_PAGE} lacks the Colab badge of {_rel(path)} "
                                                     "(run make build)")


def _run_setup(*, colab: bool, installed: bool):
    namespace: dict = {}
    modules = {"google.colab": mock.MagicMock()} if colab else {}
    spec = object() if installed else None
    with mock.patch.dict(sys.modules, modules), mock.patch("importlib.util.find_spec", return_value=spec), \
         mock.patch("subprocess.run") as run:
        if not colab:
            sys.modules.pop("google.colab", None)
        exec(setup_source(REPO), namespace)
    return run


def test_setup_cell_installs_only_the_helpers_without_dependencies_on_colab():
    run = _run_setup(colab=True, installed=False)
    command = run.call_args.args[0]
    assert "--no-deps" in command and command[-1] == REPO.pip_target()
    assert not any(name in " ".join(command) for name in ("torch", "ipywidgets", "matplotlib"))


def test_setup_cell_is_quick_and_silent_when_rerun():
    assert not _run_setup(colab=True, installed=True).called


def test_setup_cell_is_harmless_outside_colab(capsys):
    assert not _run_setup(colab=False, installed=False).called
    assert "make lab" in capsys.readouterr().out


def test_load_ext_tells_a_gpu_less_colab_session_how_to_switch(capsys):
    from devicelab import load_ipython_extension

    with mock.patch.dict(sys.modules, {"google.colab": mock.MagicMock()}), \
         mock.patch("torch.cuda.is_available", return_value=False):
        load_ipython_extension(mock.MagicMock())
    assert "Runtime > Change runtime type" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------------------
# Running the notebooks in an environment shaped like Colab's (built by `make colab-env`)

FAKE_COLAB = (
    "import sys, types\n"
    "sys.modules.setdefault('google', types.ModuleType('google'))\n"
    "sys.modules['google.colab'] = types.ModuleType('google.colab')\n"
)


@pytest.fixture(scope="module")
def colab_kernel(tmp_path_factory):
    """Environment variables that start the Colab-like kernel, which imports google.colab like Colab's does.
    """
    python = COLAB_VENV / "bin" / "python"
    if not python.exists():
        if os.environ.get("CI"):
            pytest.fail(
                "the Colab-shaped environment is missing: `make test` builds it with `make colab-env`")
        pytest.skip("no Colab-shaped environment here: run `make colab-env` (make test does)")
    ipython_dir = tmp_path_factory.mktemp("ipython")
    profile = ipython_dir / "profile_default"
    profile.mkdir()
    (profile / "ipython_kernel_config.py").write_text(
        f"c.InteractiveShellApp.exec_lines = {[FAKE_COLAB]!r}\n")
    with pytest.MonkeyPatch.context() as patch:
        # where the runner finds the kernel
        patch.setenv("JUPYTER_PATH", str(COLAB_VENV / "share" / "jupyter"))
        # Colab's Python keeps what it compiles; without that, every kernel here would compile torch again
        # where the machine sets PYTHONDONTWRITEBYTECODE (the environment is installed without compiling)
        kept = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        yield {**kept, "IPYTHONDIR": str(ipython_dir)}


def test_colab_environment_is_shaped_like_colab(colab_kernel, tmp_path):
    probe = ("import importlib.util as u, ipywidgets, ipykernel; "
             "print(ipywidgets.__version__, ipykernel.__version__.split('.')[0], "
             "u.find_spec('nbgrader') is None, u.find_spec('jupyterlab') is None)")
    out = subprocess.run([COLAB_VENV / "bin" / "python", "-c", probe], capture_output=True, text=True,
                         check=True, cwd=tmp_path)
    assert out.stdout.split() == ["7.7.1", "6", "True", "True"]


def test_colab_kernels_keep_what_they_compile(colab_kernel, tmp_path):
    machine = {**colab_kernel, "PYTHONDONTWRITEBYTECODE": "1"}  # as on a machine that sets it
    kept = {}
    for name, env in (("machine", machine), ("kernel", colab_kernel)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "lesson_helpers.py").write_text("X = 1\n")
        subprocess.run([COLAB_VENV / "bin" / "python", "-c", "import lesson_helpers"], check=True, cwd=folder,
                       env=env)
        kept[name] = any((folder / "__pycache__").glob("lesson_helpers.*.pyc"))
    assert kept == {"machine": False, "kernel": True}


def test_the_wheel_colab_installs_carries_the_student_package_only(colab_kernel, tmp_path):
    probe = ("import importlib.metadata as m, importlib.util as u; print(sorted({f.parts[0] for f in "
             "m.files('devicelab') if f.parts[0] not in ('..',) and not f.parts[0].endswith('-info')}), "
             "u.find_spec('autograder') is None)")
    out = subprocess.run([COLAB_VENV / "bin" / "python", "-c", probe], capture_output=True, text=True,
                         check=True,
                         cwd=tmp_path)  # not the course root, which has autograder/ on the path
    assert out.stdout.split() == ["['devicelab']", "True"]


def _solved(release: Path, tmp_path: Path) -> Path:
    """Return a copy of a release notebook with the instructor's answers filled in."""
    source = COURSE_ROOT / "source" / release.parent.name / release.name
    nb = solved(nbformat.read(release, as_version=4), nbformat.read(source, as_version=4))
    nbformat.write(nb, tmp_path / release.name)
    return tmp_path / release.name


def _errors(nb) -> list[str]:
    return [o.get("ename", "") for c in nb.cells if c.cell_type == "code"
            and "raises-exception" not in c.metadata.get("tags", [])
            for o in c.get("outputs", []) if o.get("output_type") == "error"]


@pytest.mark.notebook
@pytest.mark.parametrize("path", STUDENT_NOTEBOOKS, ids=_rel)
def test_notebook_runs_in_a_colab_shaped_environment(path, colab_kernel, tmp_path):
    target = _solved(path, tmp_path) if path in RELEASES else path
    result = execute_notebook(target, gpu=False, env=colab_kernel, kernel_name="colab-like")
    assert not _errors(result.notebook)
    text = "\n".join(o.get("text", "") + o.get("data", {}).get("text/plain", "")
                     for c in result.notebook.cells for o in c.get("outputs", []))
    if path in RELEASES:
        assert "Correct:" in text and "Not quite" not in text, "check(...) agrees with the solved notebook"
    else:
        assert "Runtime > Change runtime type" in text, "a GPU-less Colab session is told how to get a GPU"
