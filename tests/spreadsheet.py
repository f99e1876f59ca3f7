"""How a spreadsheet and a line-by-line importer read our CSV files, and hostile text that must not fool them.

A spreadsheet runs a text cell that starts with `=`, `+`, `-` or `@` (or a tab or carriage return) as a
formula (OWASP: CSV injection); a writer that does not quote lets a comma or a line break in a name add a
column or a row, and so forge the score a spreadsheet shows beside the name.
"""

import csv
import io

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
# Notebook file names a student can choose, one per character that starts a formula.
FORMULA_NOTEBOOKS = ('=HYPERLINK("http://x","click").ipynb', "+1+1.ipynb", "-1+1.ipynb", "@SUM(A1).ipynb",
                     "\t=1+1.ipynb", "\r=1+1.ipynb")
# Names from a roster or an LMS launch (its name claim) that add columns or rows to a CSV written unquoted.
FORGING_NAMES = ("Mallory,100,100", 'Eve\n"x",100', 'Zed "the" Ray, Jr.\r\n=1+1')


def sheet(text: str) -> list[list[str | float]]:
    """Return the cells as a spreadsheet reads them, one line at a time: a quoted cell is text, a bare one a
    number (csv.QUOTE_NONNUMERIC raises on a bare cell that is no number, strict on a broken quote)."""
    return [next(csv.reader([line], quoting=csv.QUOTE_NONNUMERIC, strict=True)) for line in text.splitlines()]


def checked(text: str) -> list[list[str | float]]:
    """Assert that every row, read as CSV or line by line, has the header's columns and no text cell that
    starts a formula; return the rows as a spreadsheet reads them."""
    records = list(csv.reader(io.StringIO(text, newline=""), quoting=csv.QUOTE_NONNUMERIC, strict=True))
    lines = sheet(text)
    assert lines == records, "a cell spans two lines: a line-by-line reader sees other rows"
    header = lines[0]
    for row in lines:
        assert len(row) == len(header), f"{row} has {len(row)} columns, the header {len(header)}"
        texts = [cell for cell in row if isinstance(cell, str)]
        formulas = [c for c in texts if c.startswith(FORMULA_STARTS) or c.lstrip().startswith(FORMULA_STARTS)]
        assert not formulas, f"{formulas} would run as formulas"
    return lines
