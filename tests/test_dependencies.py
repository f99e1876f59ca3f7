"""Everything the course imports at run time is declared in pyproject.toml, in the right group."""

import importlib.metadata
import re
import sys

import pytest

from autograder import COURSE_ROOT
from autograder.grading.warm_start import top_level_imports

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# Imported only where present, with a clear message where not (GPU figures need NVIDIA's library).
OPTIONAL = {"pynvml"}


def declared(groups: list[str]) -> set[str]:
    """Return the normalised distribution names the given dependency groups list (following self-references).
    """
    project = tomllib.loads((COURSE_ROOT / "pyproject.toml").read_text())["project"]
    names: set[str] = set()
    pending = [("", project["dependencies"])] + [(g, project["optional-dependencies"].get(g, []))
                                                 for g in groups]
    while pending:
        _group, requirements = pending.pop()
        for requirement in requirements:
            name = re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0]
            extras = re.search(r"\[([^\]]+)\]", requirement)
            if name == project["name"] and extras:
                pending += [(e, project["optional-dependencies"][e]) for e in extras.group(1).split(",")]
            names.add(_normal(name))
    return names


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_modules(package: str) -> set[str]:
    """Return the top-level modules a package's source imports (at module level or inside functions)."""
    found: set[str] = set()
    for path in (COURSE_ROOT / package).rglob("*.py"):
        found |= top_level_imports(path.read_text(encoding="utf-8"))
    return found


def third_party(modules: set[str]) -> set[str]:
    """Drop the standard library and the course's own packages."""
    return {m for m in modules if m not in sys.stdlib_module_names
            and m not in ("devicelab", "autograder", "book", "benchmarks")}


@pytest.mark.parametrize(("package", "groups"), [("devicelab", []), ("autograder", ["instructor", "hub"]),
                                                 ("book", ["instructor", "book"])])
def test_every_module_imported_at_run_time_is_declared(package, groups):
    distributions = importlib.metadata.packages_distributions()
    allowed = declared(groups)
    missing = []
    for module in sorted(third_party(imported_modules(package)) - OPTIONAL):
        names = {_normal(d) for d in distributions.get(module, [])} | {_normal(module)}
        if not names & allowed:
            missing.append(f"{module} (from {sorted(names) or 'no installed distribution'})")
    assert not missing, f"{package} imports what pyproject.toml does not declare: {missing}"


def test_the_student_package_never_imports_the_instructor_tools():
    assert not {"nbgrader", "jupyterlab", "autograder"} & imported_modules("devicelab")


def test_jupyter_tools_start_without_the_slow_iri_validator():
    """`make venv` removes rfc3987-syntax: nbformat and Jupyter servers import without building its parsers,
    and nbformat still validates notebooks."""
    import subprocess

    probe = ("import sys, nbformat, jupyter_server.serverapp; "
             "nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('1')]); nbformat.validate(nb); "
             "bad = nbformat.from_dict({'nbformat': 4, 'nbformat_minor': 5, 'metadata': {}, 'cells': [{}]}); "
             "ok = False\n"
             "try:\n    nbformat.validate(bad)\nexcept nbformat.ValidationError:\n    ok = True\n"
             "sys.exit(0 if ok and 'rfc3987_syntax' not in sys.modules and 'lark' not in sys.modules else 1)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:] or "rfc3987_syntax (or lark) was imported"
