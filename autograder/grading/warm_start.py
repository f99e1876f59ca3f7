"""The grader's side of warm start: start a worker's zygotes (zygote.py, the program), ask them for kernels,
keep them standing by, and choose what they preload.

`Zygote` is one worker's zygote, `Template` the process that imported once for several and forked them,
`Standby` the zygotes kept between runs (the hub's autograde service) or started while a run is set up.
`libraries_imported` reads an assignment's notebooks for the libraries of LIBRARIES worth preloading.
"""

import functools
import json
import os
import sys
from pathlib import Path

from autograder.grading import zygote as program
from autograder.grading.zygote import LIBRARIES, WarmStartError

PROGRAM = os.path.abspath(program.__file__)  # run as a script: `serve` (the zygote), `launch` (a kernel)
AUTOGRAD_NAMES = frozenset({"backward", "optim"})


class Template:
    """The grader's handle on a zygote that imported once for several slots and forked a zygote for each
    (`Zygote.spawn_together`): it says their process ids, and ends once they have."""

    def __init__(self, process, count: int) -> None:
        self.process = process
        self.count = count
        self.pids: list[int] | None = None
        self.released: set[int] = set()  # slots whose zygote the Standby no longer uses

    def wait_ready(self) -> list[int]:
        """Wait for the zygotes' process ids, then "ready"; WarmStartError if the template says otherwise."""
        if self.pids is None:
            said = self.process.stdout.readline().decode(errors="replace").strip()
            ready = self.process.stdout.readline().decode(errors="replace").strip()
            pids = [int(word) for word in said.split()[1:] if word.isdigit()]
            if not said.startswith("zygotes ") or len(pids) != self.count or ready != "ready":
                self.process.kill()
                self.process.wait()
                raise WarmStartError(f"the zygotes did not start ({said or 'no answer'})")
            self.pids = pids
        return self.pids

    def ask_to_stop(self) -> None:
        """Close the template's stdin, which ends it and each of its zygotes (`stop` waits for that)."""
        if not self.process.stdin.closed:
            self.process.stdin.close()

    def release(self, index: int) -> None:
        """Let go of one slot's zygote (ended, or no longer wanted); stop the template once none is used."""
        self.released.add(index)
        if len(self.released) == self.count:
            self.stop()

    def stop(self) -> None:
        """End the template and its zygotes (killed if they linger); close our ends of its pipes."""
        if self.process.stdout.closed:
            return
        try:
            self.ask_to_stop()
            self.process.wait(timeout=5)
        except Exception:  # noqa: BLE001  (a template that will not stop is killed, and its zygotes with it)
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()


class Zygote:
    """A worker's zygote process: started once, asked for kernels through `launcher_argv`."""

    def __init__(self, process, socket_path: str, template: Template | None = None, index: int = 0) -> None:
        self.process = process  # a Popen: the zygote, or (with a template) the template that forked it
        self.socket_path = socket_path
        self.template = template
        self.index = index  # which of the template's zygotes
        self.parent = os.getpid()
        self.answered = False  # its "ready" line has been read

    @property
    def pid(self) -> int:
        """Return the zygote's process id (the grader leaves it out of a student's memory)."""
        if self.template is not None:
            return self.template.wait_ready()[self.index]
        return self.process.pid

    @classmethod
    def start(cls, folder: str, env: dict[str, str], libraries: tuple[str, ...] = LIBRARIES) -> "Zygote":
        """Start a zygote whose socket lies in `folder` (made here, the grader's alone); wait until ready."""
        zygote = cls.spawn(folder, env, libraries)
        zygote.wait_ready()
        return zygote

    @classmethod
    def spawn(cls, folder: str, env: dict[str, str], libraries: tuple[str, ...] = LIBRARIES) -> "Zygote":
        """Start a zygote that preloads `libraries` (of LIBRARIES) and the kernel's modules; return at once
        (it imports while the caller goes on; `wait_ready` first)."""
        return cls.spawn_together([folder], env, libraries)[0]

    @classmethod
    def spawn_together(cls, folders: list[str], env: dict[str, str], libraries: tuple[str, ...] = LIBRARIES
                       ) -> list["Zygote"]:
        """Start one zygote per folder that import once, together: with several, a template imports, then
        forks them (each its own process and socket, serving one slot as `spawn`'s does); return at once."""
        import subprocess

        paths = []
        for folder in folders:
            os.makedirs(folder, mode=0o700)
            paths.append(os.path.join(folder, "zygote.sock"))
        also = [word for path in paths[1:] for word in ("--also", path)]
        process = subprocess.Popen([sys.executable, PROGRAM, "serve", paths[0], *also,
                                    *(name for name in libraries if name in LIBRARIES)], env=env,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=folders[0])
        if len(paths) == 1:
            return [cls(process, paths[0])]
        template = Template(process, len(paths))
        return [cls(process, path, template, index) for index, path in enumerate(paths)]

    def wait_ready(self) -> None:
        """Wait for the zygote's "ready" (it has imported everything); WarmStartError if it says otherwise."""
        if self.answered:
            return
        if self.template is not None:
            self.template.wait_ready()
            self.answered = True
            return
        line = self.process.stdout.readline().decode(errors="replace").strip()
        if line != "ready":
            self.process.kill()
            self.process.wait()
            raise WarmStartError(f"the zygote did not start ({line or 'no answer'})")
        self.answered = True

    def launcher_argv(self, spec_path: str) -> list[str]:
        """Return the kernelspec argv that starts one kernel as `spec_path` describes."""
        return [sys.executable, "-I", "-S", PROGRAM, "launch", spec_path, "-f",
                "{connection_file}"]

    def write_spec(self, spec_path: str, program: list[str], holder: list[str], address_space_mib: int,
                   file_mib: int, cold: list[str], cgroup_procs: str = "") -> None:
        """Write what the launcher needs: the kernel's program, the holder's bubblewrap arguments (ending in
        `--`), the limits, the cold command to fall back on (both without `-f CONNECTION_FILE`), and the
        worker's cgroup (its cgroup.procs) that the kernel must join, if it has one."""
        spec = {"socket": self.socket_path, "program": program, "holder": holder,
                "address_space_mib": address_space_mib, "file_mib": file_mib, "cold": cold,
                "cgroup_procs": cgroup_procs}
        with open(spec_path, "w", encoding="utf-8") as handle:
            json.dump(spec, handle)

    def ask_to_stop(self) -> None:
        """Close the zygote's stdin, which ends it (`stop` waits for that); a template's zygotes end together.
        """
        if self.template is not None:
            self.template.ask_to_stop()
        elif not self.process.stdin.closed:
            self.process.stdin.close()

    def alive(self) -> bool:
        """Return True while the zygote runs (also asked in a forked worker, which is not its parent)."""
        if self.template is not None:
            if self.template.pids is None:
                return self.template.process.poll() is None if os.getpid() == self.parent else False
            return _running(self.pid)
        if os.getpid() == self.parent:
            return self.process.poll() is None
        return _running(self.pid)

    def stop(self) -> None:
        """End the zygote (its stdin closing ends it; killed if it lingers); close our ends of its pipes. One
        of a template's is let go: the template ends once none of its zygotes is used."""
        if self.template is not None:
            self.template.release(self.index)
            return
        try:
            self.ask_to_stop()
            self.process.wait(timeout=5)
        except Exception:  # noqa: BLE001  (a zygote that will not stop is killed)
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()


def _running(pid: int) -> bool:
    """Return True while the process runs (not ended, not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def top_level_imports(source: str) -> set[str]:
    """Return the top-level modules that Python source imports anywhere (SyntaxError: it cannot parse)."""
    import ast

    return _imports(ast.parse(source))


def _imports(tree) -> set[str]:
    import ast

    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def _uses_autograd(tree) -> bool:
    """Return whether code uses a name of AUTOGRAD_NAMES (`loss.backward()`, `torch.optim.SGD`)."""
    import ast

    return any((node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)) in AUTOGRAD_NAMES
               for node in ast.walk(tree))


def _imported_names(tree, package: str = "") -> set[str]:
    """Return the full names of the modules a tree of code imports anywhere (inside functions too); relative
    imports resolved against `package`, the package the code is in."""
    import ast

    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1] if package else []
                base = ".".join([*parts, *([base] if base else [])])
            if base:
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in node.names)  # a submodule, where it is one
    return found


def _course_source(name: str) -> Path | None:
    """Return the source file of a course module, found beside the installed package (nothing imported)."""
    import importlib.util

    root = name.split(".", 1)[0]
    spec = importlib.util.find_spec(root)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations)), *name.split(".")[1:])
    for candidate in (folder.with_suffix(".py"), folder / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def course_modules_imported(notebooks) -> tuple[str, ...]:
    """Return the modules of the course's own packages (sandbox.STUDENT_PACKAGES) that the notebooks' code
    cells import, and those these import in turn (at their top or inside a function, found in their source):
    the grading kernel imports them all before any student code, so that the guard records them as they are
    (guard_kernel/kernel.py). Read once per version of the notebooks (a worker asks for every student)."""
    return _course_modules(tuple((str(path), os.stat(path).st_mtime_ns) for path in notebooks))


@functools.lru_cache(maxsize=8)
def _course_modules(notebooks: tuple[tuple[str, int], ...]) -> tuple[str, ...]:
    import ast

    from autograder.grading.sandbox import STUDENT_PACKAGES

    def ours(names: set[str]) -> set[str]:
        return {n for n in names if n.split(".", 1)[0] in STUDENT_PACKAGES}

    wanted: set[str] = set()
    for path, _ in notebooks:
        with open(path, encoding="utf-8") as handle:
            cells = json.load(handle).get("cells", [])
        for cell in cells:
            source = cell.get("source", "") if cell.get("cell_type") == "code" else ""
            try:
                wanted |= ours(_imported_names(ast.parse("".join(source) if isinstance(source, list)
                                                         else str(source))))
            except (SyntaxError, ValueError):
                continue
    found: set[str] = set()
    while wanted - found:
        name = min(wanted - found)
        found.add(name)
        source = _course_source(name)
        if source is None:
            continue
        package = name if source.name == "__init__.py" else name.rpartition(".")[0]
        try:
            wanted |= ours(_imported_names(ast.parse(source.read_text(encoding="utf-8")), package))
        except (OSError, SyntaxError, ValueError):
            continue
    return tuple(sorted(name for name in found if _course_source(name) is not None))


def libraries_imported(notebooks: list[str]) -> tuple[str, ...]:
    """Return those of LIBRARIES that the notebooks' code cells import, and torch._dynamo where they import
    torch and use autograd or optimizers (cells Python cannot parse are skipped: a library they alone import
    is imported in the kernel instead)."""
    import ast

    found: set[str] = set()
    for path in notebooks:
        with open(path, encoding="utf-8") as handle:
            cells = json.load(handle).get("cells", [])
        for cell in cells:
            if cell.get("cell_type") != "code":
                continue
            source = cell.get("source", "")
            try:
                tree = ast.parse("".join(source) if isinstance(source, list) else str(source))
            except (SyntaxError, ValueError):
                continue
            found |= _imports(tree)
            if _uses_autograd(tree):
                found.add("torch._dynamo")
    if "torch" not in found:
        found.discard("torch._dynamo")
    return tuple(name for name in LIBRARIES if name in found)


class Standby:
    """Zygotes kept running between grading runs (the hub's autograde service) or started while a run is set
    up (`early_zygotes`), so that a submission's kernel is forked at once; each serves one worker at a time
    (its slot), and those started together import once."""

    def __init__(self, folder: str, env: dict[str, str], libraries: tuple[str, ...] = LIBRARIES) -> None:
        self.folder = folder
        self.env = env
        self.libraries = libraries
        self.zygotes: dict[int, Zygote] = {}
        self.started = 0

    def launch(self, count: int) -> None:
        """Start the zygotes of slots 0..count-1 that are missing or dead, without waiting for them (several
        at once import together: `Zygote.spawn_together`)."""
        missing = [slot for slot in range(count)
                   if slot not in self.zygotes or not self.zygotes[slot].alive()]
        folders = []
        for slot in missing:
            if slot in self.zygotes:
                self.zygotes.pop(slot).stop()
            self.started += 1
            folders.append(os.path.join(self.folder, f"z{self.started}"))
        if folders:
            self.zygotes.update(zip(missing, Zygote.spawn_together(folders, self.env, self.libraries),
                                    strict=True))

    def ready(self, count: int) -> tuple[Zygote, ...]:
        """Return `count` running zygotes (slots 0..count-1), starting those missing or dead."""
        self.launch(count)
        for slot in range(count):
            self.zygotes[slot].wait_ready()
        return tuple(self.zygotes[slot] for slot in range(count))

    def stop(self) -> None:
        """End every zygote (all asked at once, then each waited for)."""
        for zygote in self.zygotes.values():
            zygote.ask_to_stop()
        for zygote in self.zygotes.values():
            zygote.stop()
        self.zygotes.clear()

