"""Exercise sets for `check` / `hint` (/ `solution` in lessons): one module per assignment or lesson."""
