"""Keep notebooks clean: no outputs, no execution counts, stable ids, only the metadata the course needs."""

import hashlib
import json
import re
from pathlib import Path

import nbformat

from autograder.cells import grade_id

KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}
# Notebook-level metadata the course keeps (Colab reads "colab" and "accelerator").
KEPT_NOTEBOOK_METADATA = ("colab", "accelerator")
# Cell-level metadata the course keeps; nbgrader's own and the tags that drive execution.
KEPT_CELL_METADATA = ("nbgrader", "tags", "deletable", "editable")
_VALID_ID = re.compile(r"^[a-zA-Z0-9-_]{1,64}$")


def _stable_id(cell: dict, taken: set[str]) -> str:
    """Return the cell's id if usable, else one derived from its grade_id or its source."""
    for candidate in (cell.get("id"), grade_id(cell)):
        if isinstance(candidate, str) and _VALID_ID.match(candidate) and candidate not in taken:
            return candidate
    source = cell.get("source", "")
    digest = hashlib.sha1("".join(source).encode("utf-8")).hexdigest()
    for length in range(8, 41):
        candidate = digest[:length]
        if candidate not in taken:
            return candidate
    raise ValueError("could not derive a unique cell id")


def tidy_notebook(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Return the notebook with outputs, counts and stray metadata removed and ids normalised."""
    nb.nbformat, nb.nbformat_minor = 4, 5
    kept = {key: nb.metadata[key] for key in KEPT_NOTEBOOK_METADATA if key in nb.metadata}
    nb.metadata = nbformat.from_dict({"kernelspec": dict(KERNELSPEC), "language_info": {"name": "python"},
                                      **kept})
    for cell in nb.cells:
        cell.metadata = nbformat.from_dict(
            {key: cell.metadata[key] for key in KEPT_CELL_METADATA if key in cell.metadata}
        )
        if "tags" in cell.metadata:
            tags = sorted(set(cell.metadata["tags"]))
            if tags:
                cell.metadata["tags"] = tags
            else:
                del cell.metadata["tags"]
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        else:
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
            if not cell.get("attachments"):
                cell.pop("attachments", None)
        cell.source = cell.source.rstrip() if isinstance(cell.source, str) else "".join(cell.source).rstrip()
    return nb


def _with_stable_ids(raw: dict) -> dict:
    """Give every cell of a raw notebook dict a valid, unique id, deterministically."""
    raw["nbformat"], raw["nbformat_minor"] = 4, 5
    taken: set[str] = set()
    for cell in raw.get("cells", []):
        cell["id"] = _stable_id(cell, taken)
        taken.add(cell["id"])
    return raw


def tidy_text(text: str) -> str:
    """Return the tidy serialisation of a notebook given as JSON text."""
    raw = json.loads(text)
    if raw.get("nbformat") != 4:
        raw = json.loads(nbformat.writes(nbformat.reads(text, as_version=4)))
    nb = nbformat.from_dict(_with_stable_ids(raw))
    nbformat.validate(nb)
    return nbformat.writes(tidy_notebook(nb)) + "\n"


def tidy_file(path: Path) -> bool:
    """Tidy one notebook file in place; return True when it changed."""
    before = path.read_text(encoding="utf-8")
    after = tidy_text(before)
    if after != before:
        path.write_text(after, encoding="utf-8")
        return True
    return False


def is_tidy(path: Path) -> bool:
    """Return True when the file is already exactly its tidy form."""
    text = path.read_text(encoding="utf-8")
    return tidy_text(text) == text
