"""CSV that a spreadsheet opens safely: every CSV the project writes goes through here.

Text cells are always quoted and kept on one line, so a comma, a quote or a line break in a name never adds
a column or a row (not even for an importer that splits lines first); a text cell that a spreadsheet would
run as a formula (it starts with `=`, `+`, `-`, `@`, a tab or a carriage return, also after spaces) gets a
leading `'`, as OWASP's CSV injection guidance says. Numbers are written bare and stay numbers, negative ones
included.

So that what we read back is exactly what we wrote, a text that already starts like a neutralised cell (`'`
before a formula) is quoted once more, and `restore` takes one `'` off only where `spreadsheet_safe` put it.
"""

import csv
import io
import re
from collections.abc import Iterable
from typing import TextIO

Cell = str | int | float
# A formula start after any spaces and quotes, or a tab or carriage return after any quotes: a text that
# begins so is neutralised. Both still match with one more `'` in front, which is what makes `restore` exact.
_FORMULA = re.compile(r"['\s]*[=+\-@]|'*[\t\r]")


def spreadsheet_safe(text: str) -> str:
    """Return text on one line that a spreadsheet shows as text and never runs as a formula (OWASP)."""
    one_line = " ".join(text.splitlines())
    return f"'{one_line}" if _FORMULA.match(one_line) else one_line


def restore(cell: str) -> str:
    """Return the text that spreadsheet_safe made this cell from (a cell it left alone, as it is)."""
    return cell[1:] if cell[:1] == "'" and _FORMULA.match(cell[1:]) else cell


def restored(row: dict) -> dict:
    """Return a csv.DictReader row with every text cell restored (extra cells, under None, as they are)."""
    return {key: restore(value) if isinstance(value, str) else value for key, value in row.items()}


def figure(value: float) -> int | float:
    """Return a whole number as an int, so that its cell says 10 and not 10.0."""
    return int(value) if float(value).is_integer() else value


def _cell(value: Cell) -> Cell:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return spreadsheet_safe(str(value))
    return value


def write_rows(handle: TextIO, rows: Iterable[Iterable[Cell]]) -> None:
    """Write rows as CSV: text quoted, on one line and spreadsheet-safe; numbers bare."""
    writer = csv.writer(handle, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n")
    writer.writerows([_cell(value) for value in row] for row in rows)


def rows_text(rows: Iterable[Iterable[Cell]]) -> str:
    """Return rows as CSV text (write_rows)."""
    out = io.StringIO()
    write_rows(out, rows)
    return out.getvalue()
