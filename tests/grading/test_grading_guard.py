"""The grading kernel's guard, piece by piece, in this process (the end-to-end cases are in
test_grading_tamper.py).

No audit hook is ever installed here (Python cannot remove one): `Guard.audit` is called directly.
"""

import json
import os
import sys
import types

import pytest
from IPython.core.interactiveshell import InteractiveShell

from autograder.grading.guard_kernel.grader_channel import Channel
from autograder.grading.guard_kernel.guard import Guard, TamperingBlocked
from autograder.grading.guard_kernel.snapshot import Change, Snapshot, is_code
from autograder.grading.guard_kernel.tracer import (
    _allowed_codes,
    _bound_names,
    _test_names,
    is_students,
    library_roots,
    make_tracer,
)
from autograder.grading.tamper import CellRecords, ChannelReader, describe_change, suspicious_code


@pytest.fixture
def shell():
    """An IPython shell of this process, with the snapshot's view of it restored after the test (and the
    shell dropped again if this made it: a later module of the same worker may need another kind of shell)."""
    made = not InteractiveShell.initialized()
    ip = InteractiveShell.instance()
    ip.run_cell("pass", silent=True)  # as the grading kernel warms up before its snapshot
    snapshot = Snapshot.take(ip)
    yield ip, snapshot
    snapshot.restore()
    if made:
        InteractiveShell.clear_instance()


def wheres(changes: list[Change]) -> set[str]:
    return {c.where for c in changes}


def test_a_pristine_shell_has_nothing_to_restore(shell):
    ip, snapshot = shell
    ip.run_cell("x = 1\nimport collections\nPoint = collections.namedtuple('Point', 'a b', defaults=[0])")
    assert snapshot.restore() == []


def test_input_and_ast_transformers_are_taken_out_again(shell):
    ip, snapshot = shell
    ip.input_transformers_cleanup.append(lambda lines: ["pass\n"])
    ip.input_transformers_post.append(lambda lines: ["pass\n"])
    ip.ast_transformers.append(object())
    found = wheres(snapshot.restore())
    assert {"TransformerManager.cleanup_transforms", "InteractiveShell.input_transformers_post",
            "InteractiveShell.ast_transformers"} <= found
    assert ip.input_transformers_post == [] and ip.ast_transformers == []
    assert ip.run_cell("assert 1 == 2").error_in_exec is not None


def test_replaced_methods_are_put_back_however_they_were_reached(shell):
    ip, snapshot = shell
    original = InteractiveShell.run_cell
    setattr(ip, "run" + "_cell", lambda *a, **k: None)
    setattr(InteractiveShell, "transform_cell", lambda self, cell: "pass\n")  # noqa: B010
    ip.set_custom_exc((Exception,), lambda *a, **k: None)
    found = wheres(snapshot.restore())
    assert {"InteractiveShell.run_cell", "InteractiveShell.transform_cell", "InteractiveShell.CustomTB",
            "InteractiveShell.custom_exceptions"} <= found
    assert "run_cell" not in vars(ip) and InteractiveShell.run_cell is original
    assert ip.custom_exceptions == ()


def test_event_callbacks_are_removed_and_library_ones_are_not_flagged(shell):
    ip, snapshot = shell
    import matplotlib_inline.backend_inline as inline

    ip.events.register("post_execute", inline.flush_figures)
    ip.events.register("pre_run_cell", lambda *a: None)
    changes = {c.where: c for c in snapshot.restore()}
    assert changes["EventManager.callbacks['post_execute']"].benign
    assert not changes["EventManager.callbacks['pre_run_cell']"].benign
    assert ip.events.callbacks["pre_run_cell"] == []


def test_tracing_hooks_builtins_and_module_functions_are_restored(shell):
    _, snapshot = shell
    import builtins

    from IPython.core import compilerop

    real_exec = builtins.exec
    tracer = sys.gettrace()
    try:
        sys.settrace(lambda *a: None)
        builtins.exec = lambda *a, **k: None
        compilerop.compile = lambda *a, **k: None
        found = wheres(snapshot.restore())
    finally:
        sys.settrace(tracer)
        builtins.exec = real_exec
    assert {"sys.settrace", "builtins.exec", "IPython.core.compilerop.compile"} <= found
    assert builtins.exec is real_exec and "compile" not in vars(compilerop)


def test_a_method_added_in_place_of_a_removed_name_is_found_though_the_size_is_the_same(shell):
    ip, snapshot = shell
    # The quick check passes a namespace of the same size whose names all hold their objects: removing a name
    # that held None and adding code under a new one keeps the size, and must not pass.
    gone = next(name for name, value in vars(ip).items() if value is None)
    size = len(vars(ip))
    delattr(ip, gone)
    vars(ip)["run_cell_quietly"] = lambda *a, **k: None
    assert len(vars(ip)) == size
    changes = wheres(snapshot.restore())
    assert "InteractiveShell.run_cell_quietly" in changes
    assert "run_cell_quietly" not in vars(ip)
    setattr(ip, gone, None)


def test_a_replaced_hook_list_element_is_found_when_nothing_else_changed(shell):
    ip, snapshot = shell
    # the list object is the same, so the namespace passes the quick check: its elements are compared anyway
    ip.ast_transformers[:] = [object()]
    assert "InteractiveShell.ast_transformers" in wheres(snapshot.restore())
    assert ip.ast_transformers == []


def test_a_replaced_class_of_the_shell_is_put_back(shell):
    ip, snapshot = shell
    original = type(ip)
    ip.__class__ = type("Evil", (original,), {"run_cell": lambda *a, **k: None})
    assert "InteractiveShell.__class__" in wheres(snapshot.restore())
    assert type(ip) is original


def test_the_audit_hook_blocks_code_changes_of_the_execution_path_only():
    guard = Guard(channel=types.SimpleNamespace(write=lambda record: None))
    guard.snapshot = Snapshot()
    with pytest.raises(TamperingBlocked):
        guard.audit("object.__setattr__", (InteractiveShell.run_cell, "__code__", (lambda: 0).__code__))

    def students_own():
        return 1

    guard.audit("object.__setattr__", (students_own, "__defaults__", (1,)))  # namedtuple does this
    guard.audit("sys.settrace", ())  # allowed in answer cells (restored before the next)
    guard.testing = True
    with pytest.raises(TamperingBlocked):
        guard.audit("sys.settrace", ())
    guard.audit("gc.get_referrers", ())
    assert guard.findings == ["changes a function's code in place", "sets a tracing hook (sys.settrace)",
                              "walks the garbage collector (gc.get_referrers)"]


def test_is_code_knows_what_can_run():
    assert all(is_code(v) for v in (print, len, str, lambda: 0, property(), staticmethod(len), types))
    assert not any(is_code(v) for v in (1, "s", [print], None))


def test_changes_are_described_in_words():
    assert describe_change({"where": "TransformerManager.cleanup_transforms"}) == \
        "installs an IPython input transformer"
    assert describe_change({"where": "EventManager.callbacks['pre_run_cell']"}) == \
        "registers an IPython event callback ('pre_run_cell')"
    assert describe_change({"where": "IPythonKernel.do_execute"}) == "replaces the kernel's do_execute"
    assert describe_change({"where": "sys.settrace"}) == "sets a tracing hook (sys.settrace)"
    assert describe_change({"where": "builtins.exec", "what": "replaced"}) == "replaces builtins.exec"


def test_the_code_reading_ignores_comments_and_honest_code():
    assert suspicious_code("import sys\nsys.excepthook = print") == ["replaces sys.excepthook"]
    assert suspicious_code("# we never touch sys.excepthook\nx = 1") == []
    assert suspicious_code("%timeit double(2)\nfrom IPython.display import display") == []


def write_lines(path: str, lines: list) -> None:
    """Write records as the grading kernel does (its Channel: a key line, then signed lines); bytes as they
    are.
    """
    channel = Channel.open(path)
    for line in lines:
        if isinstance(line, bytes):
            os.write(channel.fd, line + b"\n")
        else:
            channel.write(line)
    os.close(channel.fd)


def test_the_channel_reads_records_and_notices_forged_or_foreign_lines(tmp_path):
    path = str(tmp_path / "guard.fifo")
    reader = ChannelReader(path)
    write_lines(path, [{"msg_id": "a", "phase": "before", "changes": [], "findings": []},
                       {"msg_id": "a", "phase": "after", "changes": [], "findings": []}])
    assert reader.wait_for("a", 5).confirmed
    reader.close()
    assert not reader.flooded and not os.path.exists(path)

    forged = ChannelReader(path)
    write_lines(path, [{"msg_id": "b", "phase": "before", "changes": [{"where": "x"}], "findings": []},
                       {"msg_id": "b", "phase": "before", "changes": [], "findings": []}, b"not json"])
    forged.close()
    assert forged.flooded and forged.records["b"].changes("before") == [{"where": "x"}]


def test_lines_without_the_kernels_key_are_forged_and_alarms_count_at_once(tmp_path):
    path = str(tmp_path / "guard.fifo")
    reader = ChannelReader(path)
    unsigned = json.dumps({"msg_id": "c", "phase": "after", "changes": [], "findings": []}).encode()
    write_lines(path, [{"msg_id": "c", "phase": "before", "changes": [], "findings": []}, unsigned,
                       b"0" * 32 + b" " + unsigned.hex().encode(),
                       {"msg_id": "c", "phase": "alarm", "finding": "walks the garbage collector"},
                       {"msg_id": "c", "phase": "after", "changes": [], "findings": []}])
    reader.close()
    cell = reader.records["c"]
    assert reader.flooded and cell.after == {"msg_id": "c", "phase": "after", "changes": [], "findings": []}
    assert cell.findings() == ["walks the garbage collector"] and not cell.confirmed


def test_a_test_is_confirmed_only_with_both_records_and_no_change():
    clean = {"changes": [], "findings": []}
    assert CellRecords(clean, clean).confirmed
    assert not CellRecords(None, clean).confirmed and not CellRecords(clean, None).confirmed
    assert not CellRecords(clean, {"changes": [{"where": "sys.settrace"}], "findings": []}).confirmed
    assert CellRecords(clean, {"changes": [{"where": "x", "benign": True}], "findings": []}).confirmed
    assert not CellRecords(clean, {"changes": [], "findings": ["sets a tracing hook"]}).confirmed


def _trace_test(answer: str, test: str) -> list[str]:
    """Run `test` against `answer` (as cells of their own) under the guard's test tracer; return its reports.
    """
    ns: dict = {}
    exec(compile(answer, "/cells/answer.py", "exec"), ns)
    names, attributes = _test_names(test)
    found: list[str] = []
    tracer = make_tracer(ns, frozenset(), ["/cells/test.py"], attributes, _allowed_codes(names, ns),
                         library_roots(), found.append)
    before = sys.gettrace()
    sys.settrace(tracer)
    try:
        exec(compile(test, "/cells/test.py", "exec"), ns)
    finally:
        sys.settrace(before)
    return found


def test_the_test_tracer_reports_answers_that_lie_and_not_honest_ones():
    liar = ("class Yes:\n    def __eq__(self, other):\n        return True\n\ndef double(x):\n"
            "    return Yes()\n")
    assert _trace_test(liar, "assert double(2) == 4") == [
        "the test called code from an answer cell that it does not name (__eq__)"]
    shadow = "def double(x):\n    return 0\n\nall = lambda *a: True\n"
    assert _trace_test(shadow, "assert all([double(2) == 4])") == [
        "the test called code from an answer cell that it does not name (<lambda>)"]
    honest = ("class Pair:\n    def __init__(self, a):\n        self.a = a\n\n    def __eq__(self, other):\n"
              "        return True\n\n    def total(self):\n        return self.a\n\n"
              "def double(x):\n    return Pair(2 * x).total()\n")
    assert _trace_test(honest, "assert double(2) == 4\nassert Pair(3).total() == 3") == []


def test_tracing_starts_as_ipython_runs_the_tests_code_and_stops_after_it(shell):
    from IPython.core import interactiveshell

    ip, _ = shell
    guard = Guard(channel=types.SimpleNamespace(write=lambda record: None))
    guard.snapshot, guard.ns = Snapshot(), ip.user_ns
    guard.machinery = frozenset({id(vars(interactiveshell))})
    ipython = types.SimpleNamespace(f_globals=vars(interactiveshell))  # the frame that calls exec
    before = sys.gettrace()
    try:
        guard.testing = True
        guard._start_test("assert True")
        assert sys.gettrace() is before, "not while IPython reads and compiles the cell"
        guard._exec((compile("assert True", "<cell-1>", "exec"),), ipython)
        assert sys.gettrace() is guard.tracer and guard.test_file == ["<cell-1>"]
        guard._stop_test()
        assert sys.gettrace() is None and guard.findings == []

        guard._start_test("# a test cell of comments runs no code")
        guard._stop_test()
        assert guard.findings == []

        guard._start_test("assert True")  # IPython never ran it: something ran it without exec or eval
        guard._stop_test()
        assert guard.findings == ["ran a test without IPython running its code (so it could not be traced)"]
        guard.findings = []

        guard._start_test("assert True")
        guard._exec((compile("assert True", "<cell-2>", "exec"),), ipython)
        sys.settrace(None)  # what a student's code would do to escape it
        guard._stop_test()
        assert guard.findings == ["replaced the grader's tracer while a test ran"]
    finally:
        sys.settrace(before)


def test_student_code_is_told_from_library_code_by_where_it_lives():
    kinds: dict = {}
    ns: dict = {}
    assert is_students(ns, ns, ("/lib",), kinds)
    assert not is_students({"__file__": "/lib/torch/__init__.py"}, ns, ("/lib",), kinds)
    assert is_students({"__file__": "/work/helper.py"}, ns, ("/lib",), kinds)


def test_a_namedtuple_the_test_makes_itself_is_not_student_code():
    answer = "def pair(a, b):\n    return (a, b)\n"
    test = "from collections import namedtuple\nP = namedtuple('P', 'a b')\nassert P(1, 2) == pair(1, 2)"
    assert _trace_test(answer, test) == []


def test_only_close_closes_the_channel_so_a_late_reader_never_closes_a_reused_descriptor(tmp_path):
    path = str(tmp_path / "guard.fifo")
    reader = ChannelReader(path)
    write_lines(path, [{"msg_id": "d", "phase": "before", "changes": [], "findings": []}])
    reader._thread.join(5)  # the kernel closed its end: the reader has stopped
    assert not reader._thread.is_alive()
    os.fstat(reader._fd)  # still open: the reader leaves it to close()
    reader.close()
    with pytest.raises(OSError):
        os.fstat(reader._fd)


def test_the_names_a_set_up_cell_binds_are_read_from_its_code():
    code = ("import torch\nimport torch.nn.functional as F\nimport os.path\nfrom x import a, b as c\n"
            "from y import *\ndef f():\n    inner = 1\nclass K:\n    pass\nn, (m, k) = 1, (2, 3)\n"
            "total: int = 0\nif True:\n    hidden = 1\n")
    assert _bound_names(code) == {"torch": ("torch", None), "F": ("torch.nn.functional", None),
                                  "os": ("os", None), "a": ("x", "a"), "c": ("x", "b"), "f": None, "K": None,
                                  "n": None, "m": None, "k": None, "total": None}
    assert _bound_names("from . import a") == {"a": None}
    assert _bound_names("%time x = 1") == {}
