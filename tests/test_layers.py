"""The packages depend only downward (CONTRIBUTING, *Map of the code*): every import of every module, read
from its source (imports inside functions included), is checked against the rule of the part it belongs to."""

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The hub's parts, lowest first, each with the parts it may import besides its own (CONTRIBUTING's map says
# the same, row by row; EVERY: any part). A part is named by module paths under autograder.hub; a module
# belongs to the longest path that holds it.
EVERY = "every part"
HUB_LAYERS = (
    ("settings", ("settings", "part_settings", "database", "stores", "text"), ()),
    ("spawning", ("spawning",), ("settings",)),
    ("exchange", ("exchange",), ("settings",)),
    ("folder exchange", ("exchange.folder",), ("exchange", "settings")),
    ("http exchange", ("exchange.http",), ("exchange", "settings")),
    ("setup", ("setup",), ("http exchange", "folder exchange", "exchange", "spawning", "settings")),
    ("exchange commands", ("exchange.commands", "exchange.choice"),
     ("setup", "http exchange", "folder exchange", "exchange", "settings")),
    ("lms", ("lms",), ("setup", "settings")),
    ("service", ("service",), ("lms", "exchange commands", "http exchange", "folder exchange", "exchange",
                               "settings")),
    ("commands", ("cli", "instructor", "hub_process", "start", "node_start", "due_dates", "grade_export"),
     (EVERY,)),
)
# Programs started by path (as scripts, in the sandbox or before it): the standard library only; the grading
# kernel's package also its own modules (relative imports: it runs as a copy under another name), ipykernel.
STANDALONE = {"autograder/grading/sandbox.py": ("psutil",),  # (only in the grader's own calls)
              "autograder/grading/zygote.py": ()}
GUARD_KERNEL = "autograder/grading/guard_kernel"
GUARD_KERNEL_LIBRARIES = ("ipykernel",)


def modules(folder: str) -> list[Path]:
    """Return every Python file under a folder of the repository."""
    return sorted((ROOT / folder).rglob("*.py"))


def dotted(path: Path) -> str:
    """Return the module name of a file of the repository."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[int, str]]:
    """Return (line, module) for every absolute import in a file (`from a import b` gives a.b and a)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def hub_layer(module: str) -> int | None:
    """Return the index in HUB_LAYERS of a module of the hub (None for the package itself and outside it)."""
    parts = module.split(".")
    if parts[:2] != ["autograder", "hub"] or len(parts) < 3:
        return None
    inside = ".".join(parts[2:])
    holders = [(len(name), index) for index, (_, names, _) in enumerate(HUB_LAYERS) for name in names
               if inside == name or inside.startswith(name + ".")]
    if holders:
        return max(holders)[1]
    raise AssertionError(f"{module} is in no part of the hub: add it to HUB_LAYERS and CONTRIBUTING's map")


def test_each_part_of_the_hub_imports_only_its_own_and_the_parts_it_may():
    wrong = []
    for path in modules("autograder/hub"):
        mine = hub_layer(dotted(path))
        for line, name in imports(path):
            theirs = hub_layer(name) if name.startswith("autograder.hub.") else None
            if mine is None or theirs is None or theirs == mine:
                continue
            allowed = HUB_LAYERS[mine][2]
            if EVERY not in allowed and HUB_LAYERS[theirs][0] not in allowed:
                wrong.append(f"{path.relative_to(ROOT)}:{line} ({HUB_LAYERS[mine][0]}) imports {name} "
                             f"({HUB_LAYERS[theirs][0]})")
    assert wrong == []


@pytest.mark.parametrize(("folder", "forbidden", "except_for"), [
    ("devicelab", "autograder", ()),  # the student package stands alone (Colab installs it alone)
    ("autograder/grading", "autograder.hub", ()),  # the grader knows nothing of the hub
    ("autograder", "autograder.hub", ("autograder/hub", "autograder/__main__.py")),  # nor the course's tools
])
def test_lower_packages_never_import_higher_ones(folder, forbidden, except_for):
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {name}"
             for path in modules(folder) if not str(path.relative_to(ROOT)).startswith(except_for)
             for line, name in imports(path) if name == forbidden or name.startswith(forbidden + ".")]
    assert wrong == []


def _outside(name: str, allowed: tuple[str, ...]) -> bool:
    top = name.split(".")[0]
    return top not in sys.stdlib_module_names and top not in allowed


def test_programs_started_by_path_import_only_the_standard_library():
    wrong = [f"{path}:{line} imports {name}" for path, allowed in STANDALONE.items()
             for line, name in imports(ROOT / path) if _outside(name, allowed)]
    assert wrong == []


def test_the_grading_kernel_is_self_contained_and_imports_nothing_once_student_code_can_run():
    """It is copied whole into each sandbox and imported there under its own name: nothing of ours but its
    own modules (relative imports), and no import that student code could redirect once cells run."""
    wrong = []
    for path in modules(GUARD_KERNEL):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        wrong += [f"{path.name}:{line} imports {name}" for line, name in imports(path)
                  if _outside(name, GUARD_KERNEL_LIBRARIES)]
        for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
            late = [n for n in ast.walk(function) if isinstance(n, ast.Import | ast.ImportFrom)]
            if late and (path.name, function.name) != ("kernel.py", "main"):  # (before any student code)
                wrong.append(f"{path.name}:{late[0].lineno} imports inside {function.name}")
    assert wrong == []


# Where a module is named by a string: generated configuration, `python -m ...` command lines, plugin classes.
NAMED = re.compile(r"""["'`](autograder(?:\.\w+)+)""")


def _named_in(path: Path) -> list[str]:
    return NAMED.findall(path.read_text(encoding="utf-8"))


def test_every_module_named_in_a_template_or_command_line_exists():
    """`hub setup` writes module paths into the configuration (spawner, authenticator, services, nbgrader's
    plugins) and the hub's commands run modules by name as the grader account: each one must resolve."""
    templates = sorted((ROOT / "autograder/hub/setup/templates").rglob("*.j2"))
    assert {name for path in templates for name in _named_in(path)}, "the templates name nbgrader's plugins"
    named = sorted({name for path in [*templates, *modules("autograder"), ROOT / "Makefile"]
                    for name in _named_in(path)})
    assert [name for name in named if not _resolves(name)] == []


def _module_file(name: str) -> Path | None:
    """Return the file of a module of the repository by its dotted name (None when there is none)."""
    base = ROOT.joinpath(*name.split("."))
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


def _resolves(name: str) -> bool:
    """Return whether a dotted name is a module of ours, or a class, function or constant defined in one."""
    if _module_file(name):
        return True
    module, _, attribute = name.rpartition(".")
    found = _module_file(module)
    return found is not None and re.search(rf"^(class|def) {attribute}\b|^{attribute} =",
                                           found.read_text(encoding="utf-8"), re.MULTILINE) is not None


def test_the_map_in_contributing_names_every_package():
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    folders = [p.parent.relative_to(ROOT) for p in [*modules("autograder"), *modules("devicelab")]
               if p.name == "__init__.py"]
    assert [f"{folder}/" for folder in folders if f"{folder}/" not in text] == []
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| `autograder/hub/")]
    for name, members, allowed in HUB_LAYERS:
        assert all(member.replace(".", "/") in text for member in members), name
        if name == "settings":  # its rows are its modules, which import each other
            continue
        first = f"autograder/hub/{members[0].replace('.', '/')}"
        (row,) = [r for r in rows if r[0].split("`")[1] in (f"{first}/", f"{first}.py")]
        said = {word.strip().removeprefix("the ").lower() for word in row[-1].strip(" |").split(",")}
        assert said == {a.lower() for a in allowed}, (name, row[-1])


def test_no_two_modules_of_ours_import_each_other():
    """A circle of imports (a imports b, b imports a, however far round) means neither module can be read, or
    changed, without the other: the design has one part in two files. Imports inside functions count too."""
    graph = {dotted(p): {n for _, n in imports(p) if _module_file(n)}
             for folder in ("autograder", "devicelab") for p in modules(folder)}
    graph = {m: {n for n in names if n in graph and n != m} for m, names in graph.items()}
    circles = set()
    for start in graph:
        stack, seen = [(start, (start,))], set()
        while stack:
            module, path = stack.pop()
            for name in graph[module]:
                if name == start:
                    circles.add(" <-> ".join(sorted(path)))
                elif name not in seen:
                    seen.add(name)
                    stack.append((name, (*path, name)))
    assert sorted(circles) == []
