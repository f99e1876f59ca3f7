"""The grading kernel: an IPython kernel that runs every cell on the execution path it started with.

Student code shares its process with the tests, so it can reach IPython's extension points (input and AST
transformers, exception handlers, event callbacks), replace methods of the shell or the kernel, or set a
tracing hook, and make later test cells pass without running them as written. This kernel defends in layers:

1. *Restore* (snapshot.py). Once started, and before any student code runs, it records the execution path:
   the shell, the kernel and the objects they run cells with (their attributes and hook lists), their
   classes, the modules those come from (IPython, ipykernel, ...) and `builtins`, and the interpreter's hooks
   (tracing, profiling, `sys.excepthook`, ...), and the course's own modules the instructor's notebook
   imports (imported first, kernel.py) with the classes they define. Before every message it handles, it
   puts back whatever differs, by identity, so it does not matter how a name was reached (a string built at
   run time, `getattr`, `__import__`). The names the instructor's set-up cells bind (the grader marks those
   cells) must still hold what they bound when a graded test that reads them starts.
2. *Block* (guard.py). An audit hook (which Python never lets anyone remove) refuses what restoring cannot
   undo: changing a function's code or defaults in place; and, while a graded test cell runs, setting a
   tracing or profiling hook (one that could skip the test's lines).
3. *Seal* (seal.py). Only the audit hook holds the guard's state: the kernel's message handlers reach it by
   raising audit events (checked to come from those handlers), so no closure, frame or global that student
   code can walk to leads to it, and before it acts the hook puts the guard's own modules (every module of
   this package, and the program that started it), classes and the builtins it uses back.
4. *Report* (grader_channel.py). After every cell it compares again and writes what changed to a channel that
   only the grader reads (a FIFO opened before any student code and unlinked at once), each line signed with
   a key sent as the first line; a look into the interpreter's internals by student code (the garbage
   collector, frames outside its own, ctypes, the process's memory) is written the moment it happens, before
   it can be used.
5. *Trace tests* (tracer.py). While a graded test cell's code runs (from IPython's `exec` of it: reading and
   compiling the cell go through hooks restored before it), a trace function reports student code that the
   test's lines run without naming it (an `__eq__` or `__class__` of a returned object, a stand-in `torch`, a
   shadowed builtin) or that IPython runs on its own (a custom exception handler that swallows the test's
   error). The grader flags every report and fails the test cells it cannot confirm (see execution.py).

Runs inside the sandbox, with the standard library and ipykernel only: the grader copies this package whole
into the kernel's runtime folder, with program.py beside it as the script the kernel starts (kernel.py:
`main`). There the package is imported under its own folder's name, so its modules import each other
relatively and nothing else of ours; every import happens before any student code runs
(tests/test_layers.py checks both). In-process defences have limits; docs/instructors.md "Grading a class"
says which.
"""
