"""Benchmarks, not tests: `python -m pytest -m bench -s -p no:xdist` prints how long each notebook takes.

Each notebook runs in a kernel started anew, as a student's is: the time counts the kernel's start and its
`import torch` (the test suite's warm kernels, forked with torch imported, would leave both out).
"""

import pytest

from autograder.course import assignment_notebooks, assignments, lessons
from book.execution import cuda_present, execute_notebook
from book.warm_kernels import COLD

pytestmark = pytest.mark.bench

NOTEBOOKS = lessons() + [nb for a in assignments() for nb in assignment_notebooks(a)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_run_time(path, monkeypatch):
    monkeypatch.setenv(COLD, "1")
    result = execute_notebook(path, gpu=cuda_present())
    verdict = "within" if result.seconds < 60 else "OVER"
    print(f"\n{path.name}: {result.seconds:.1f} s top to bottom ({verdict} the 60 s target), "
          f"{result.skipped_cells} GPU-only cells skipped")
