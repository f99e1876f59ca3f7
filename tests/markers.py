"""Mark each test by what it runs, so that the suite is selected by marker (`-m browser`), not by file lists.

A test is marked `browser` when it, one of its fixtures or a helper of theirs calls anything of
`tests.browser_support` (Chromium, a running JupyterLab), and `notebook` when one of them executes a notebook
through the runners below. What a function calls is read from its code (the global names it uses, those of
its nested functions too), followed through the helpers of the test modules, so a test that only reads a
constant of `book.execution` stays unmarked and a fixture that executes the lessons marks every test using it.
"""

import types
from collections.abc import Callable, Iterator

import pytest

# What executes a whole notebook in a kernel. The command-line runners (tests/grade_commands.py,
# tests/nbgrader_commands.py) are not among them: a command line may be refused before it grades
# (test_grade_commands), and the modules that grade with them carry `pytestmark = pytest.mark.notebook`.
NOTEBOOK_RUNNERS = {
    ("book.execution", "execute_notebook"),
    ("book.execution", "executed_copy"),
    ("book.execution", "executed_copies"),
}
BROWSER_MODULES = ("tests.browser_support", "playwright")


def _names(code: types.CodeType) -> Iterator[str]:
    """Yield the global and attribute names `code` and the functions nested in it use."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _names(const)


def _uses(func: Callable, seen: set[int]) -> set[str]:
    """Return the markers `func` earns by what it calls, directly or through the test modules' helpers."""
    func = getattr(func, "__wrapped__", func)
    code = getattr(func, "__code__", None)
    if code is None or id(code) in seen:
        return set()
    seen.add(id(code))
    names = set(_names(code))
    scope = getattr(func, "__globals__", {})
    found: set[str] = set()
    for name in names:
        value = scope.get(name)
        candidates = [value]
        if isinstance(value, types.ModuleType):  # `execution.execute_notebook`: the module's attributes used
            candidates += [getattr(value, attr, None) for attr in names]
        for obj in candidates:
            module = getattr(obj, "__module__", None) or getattr(obj, "__name__", "")
            if not isinstance(module, str):
                continue
            if (module, getattr(obj, "__qualname__", "")) in NOTEBOOK_RUNNERS:
                found.add("notebook")
            if module.startswith(BROWSER_MODULES):
                found.add("browser")
            if module.startswith("tests.") and isinstance(obj, types.FunctionType):
                found |= _uses(obj, seen)
    return found


def markers_of(item: pytest.Item) -> set[str]:
    """Return the markers a collected test earns by what it and its fixtures run."""
    functions = [getattr(item, "obj", None)]
    info = getattr(item, "_fixtureinfo", None)
    if info is not None:
        functions += [definition.func for definitions in info.name2fixturedefs.values()
                      for definition in definitions]
    seen: set[int] = set()
    found: set[str] = set()
    for func in functions:
        if func is not None:
            found |= _uses(func, seen)
    return found


def mark_by_use(items: list[pytest.Item]) -> None:
    """Add to each test the markers it earns (tests/hub/test_hub_*.py get `hub` by their name)."""
    for item in items:
        for name in sorted(markers_of(item)):
            item.add_marker(getattr(pytest.mark, name))
