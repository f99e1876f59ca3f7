"""Write what an install of the course depends on (pyproject.toml's [project] table: the dependencies, the
extras, the Python it needs) to a file, rewriting it only when that changed.

The Makefile reinstalls an environment when this file is newer than the environment's stamp, so a change to
another part of pyproject.toml (the course's repository under [tool.devicelab], the test or lint settings)
reinstalls nothing. Plain text, no TOML parser: it runs on the machine's Python before anything is installed.

    python3 etc/install_inputs.py pyproject.toml build/install-inputs.toml
"""

import sys
from pathlib import Path


def project_table(text: str) -> str:
    """Return the lines of the [project] table and its sub-tables ([project.optional-dependencies], ...)."""
    kept, inside = [], False
    for line in text.splitlines():
        header = line.strip()
        if header.startswith("[") and not header.startswith("[["):
            inside = header == "[project]" or header.startswith("[project.")
        if inside:
            kept.append(line)
    return "\n".join(kept) + "\n"


def main(source: str, target: str) -> int:
    wanted = project_table(Path(source).read_text(encoding="utf-8"))
    out = Path(target)
    if not out.exists() or out.read_text(encoding="utf-8") != wanted:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
