"""The parts of out-of-process grading, without a kernel: plain data, calls and their answers, test runs, the
instructor's plan, and the files a notebook wrote copied back."""

import io
import json
import os
import pickle
from pathlib import Path

import pytest
import torch

from autograder.grading.execution import copy_written_files
from autograder.grading.plain_data import MAX_BYTES, NotPlainData, check_plain, dumps, loads
from autograder.grading.redact import failing_line
from autograder.grading.remote_calls import (
    END,
    KERNEL_SIDE,
    AnswerRejected,
    CallFailed,
    Fake,
    Plan,
    Request,
    StudentError,
    StudentFunction,
    call_line,
    read_answer,
    read_result,
    run_test,
    serve_code,
)


class AlwaysEqual:
    """An answer that says it equals anything."""

    def __eq__(self, other):
        return True


class Tensorish(torch.Tensor):
    """A tensor subclass that lies about equality."""

    def __eq__(self, other):
        return True


def kernel_side(namespace: dict, name: str, args: list, kwargs: dict | None = None, **how) -> str:
    """Answer one call as the kernel's loop does, in `namespace`; return the answer it prints. `how` is the
    rest of the request (fake, keep)."""
    return answer(namespace, name, Request(tuple(args), kwargs or {}, **how).encode())


def answer(namespace: dict, name: str, payload: bytes) -> str:
    """Answer one call whose request is `payload` as the kernel's loop does, in `namespace`."""
    space: dict = {}
    exec(KERNEL_SIDE, space)
    _, _, encoded = call_line(name, payload).partition(" ")
    return space["_devicelab_call"](namespace, name, encoded)


# --- plain data ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [None, True, 3, 2.5, 1j, "s", b"b", [1, (2, {"k": [3]})],
                                   torch.zeros(2, 3), torch.nn.Parameter(torch.ones(2)),
                                   torch.empty(10**6, 10**6, device="meta"),
                                   torch.Size([2, 3]), torch.device("cuda:1"), torch.float16,
                                   torch.arange(12.0).reshape(3, 4)[:, 1]])
def test_plain_data_crosses_unchanged(value):
    back = loads(dumps(value))
    assert type(back) is type(value)
    if isinstance(value, torch.Tensor):
        assert (back.shape, back.stride(), back.dtype, back.device) == (
            value.shape, value.stride(), value.dtype, value.device)
        if value.device.type != "meta":
            assert torch.equal(back, value)
    else:
        assert back == value


@pytest.mark.parametrize("value", [AlwaysEqual(), [AlwaysEqual()], {"k": AlwaysEqual()},
                                   torch.zeros(2).as_subclass(Tensorish), type("L", (list,), {})([1]),
                                   type("I", (int,), {})(3), object(), len])
def test_anything_else_is_refused_before_it_crosses(value):
    with pytest.raises(NotPlainData):
        dumps(value)


def test_a_pickled_object_is_never_built_on_the_grader_side():
    built = []

    class Trap:
        def __reduce__(self):
            return (built.append, ("ran",))

    for data in (pickle.dumps(Trap()), pickle.dumps(AlwaysEqual()), _saved(AlwaysEqual()), b"junk"):
        with pytest.raises(NotPlainData, match="not plain data"):
            loads(data)
    assert built == []


def test_containers_that_hold_themselves_or_nest_too_deep_are_refused():
    loop: list = []
    loop.append(loop)
    with pytest.raises(NotPlainData):
        check_plain(loop)
    deep: list = []
    for _ in range(100):
        deep = [deep]
    with pytest.raises(NotPlainData):
        check_plain(deep)


def test_too_much_data_is_refused():
    with pytest.raises(NotPlainData, match="MiB"):
        loads(b"x" * (MAX_BYTES + 1))


def _saved(value) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


# --- calls --------------------------------------------------------------------------------------------------

def test_a_call_runs_the_function_in_the_kernels_namespace_and_brings_back_its_answer():
    space = {"describe": lambda t, scale=1: {"shape": tuple(t.shape), "n": t.numel() * scale}}
    content = kernel_side(space, "describe", [torch.zeros(2, 3)], {"scale": 2})
    assert read_result("describe", content) == {"shape": (2, 3), "n": 12}


def test_what_the_function_raised_is_raised_by_the_stand_in():
    class Custom(RuntimeError):
        pass

    def fails(kind):
        raise {"value": ValueError("bad shape"), "custom": Custom("on cpu and meta"),
               "own": type("Mine", (Exception,), {})("mine")}[kind]

    space = {"fails": fails}
    with pytest.raises(ValueError, match="bad shape"):
        read_result("fails", kernel_side(space, "fails", ["value"]))
    with pytest.raises(RuntimeError, match="on cpu and meta"):  # the nearest of Python's own types
        read_result("fails", kernel_side(space, "fails", ["custom"]))
    with pytest.raises(StudentError, match="Mine: mine"):
        read_result("fails", kernel_side(space, "fails", ["own"]))
    with pytest.raises(NameError):
        read_result("missing", kernel_side(space, "missing", []))


def test_an_answer_that_is_not_plain_data_is_rejected_past_a_tests_except_exception():
    space = {"liar": lambda: AlwaysEqual(), "subclass": lambda: torch.zeros(1).as_subclass(Tensorish)}
    for name in ("liar", "subclass"):
        content = kernel_side(space, name, [])
        with pytest.raises(AnswerRejected, match="not plain data"):
            try:
                read_result(name, content)
            except Exception:  # noqa: BLE001  (what a test that expects some error writes)
                pytest.fail("a rejected answer was caught by except Exception")


@pytest.mark.parametrize("answer", [None, 7, "", "!!!", "__import__('os')", "eA==",
                                    "x" * 100_000_000])
def test_an_answer_that_is_not_what_the_grader_sent_for_is_a_rejected_answer(answer):
    with pytest.raises(AnswerRejected):
        read_result("f", answer)


def test_the_kernels_loop_answers_each_call_after_the_marker_until_told_to_end(monkeypatch, capsys):
    asked = iter([call_line("double", Request((x,)).encode()) for x in (21, "ab")] + [END])
    monkeypatch.setattr("builtins.input", lambda *args: next(asked))
    space = {"double": lambda x: print("doubling") or 2 * x}
    exec(serve_code("MARK"), space)
    printed = capsys.readouterr().out
    answers = [line.split(" ", 1)[1] for line in printed.split("\n") if line.startswith("MARK ")]
    assert [read_result("double", a) for a in answers] == [42, "abab"]
    assert printed.count("doubling") == 2


def test_a_test_that_passes_something_that_cannot_cross_fails_loudly():
    with pytest.raises(CallFailed, match="cannot run out of process"):
        StudentFunction("f", lambda name, payload: {})(AlwaysEqual())


# --- fakes and arguments after the call ---------------------------------------------------------------------

def test_a_fake_the_test_names_is_set_up_in_the_kernel_around_that_call_only():
    def machine():
        return torch.cuda.is_available(), torch.cuda.device_count(), torch.backends.mps.is_available()

    space, before = {"machine": machine}, machine()
    faked = Fake("devicelab.exercises.calls:faked", {"machine": {"cuda": 3, "mps": True}})
    assert read_result("machine", kernel_side(space, "machine", [], fake=faked)) == (True, 3, True)
    alone = Fake("devicelab.exercises.calls:faked", {"machine": {"cuda": 2, "cuda_available": False}})
    assert read_result("machine", kernel_side(space, "machine", [], fake=alone)) == (False, 2, False)
    assert machine() == before, "the fake ends with the call"


def test_a_fake_can_make_an_argument_that_is_not_plain_data_in_the_kernel():
    space = {"where": lambda t: (t.device, tuple(t.shape))}
    faked = Fake("devicelab.exercises.calls:faked", {"devices": ["cuda:1"]})
    answer = kernel_side(space, "where", [torch.zeros(2, 3)], fake=faked)
    assert read_result("where", answer) == (torch.device("cuda:1"), (2, 3))


def test_a_fake_reports_a_device_per_argument_on_a_faked_machine():
    def where(first, second, third):
        plain_cuda_is_current = first.to("cuda") is first, third.to("cuda") is third
        return [t.device for t in (first, second, third)], plain_cuda_is_current, torch.cuda.current_device()

    space = {"where": where}
    faked = Fake("devicelab.exercises.calls:faked",
                 {"machine": {"cuda": 2, "current": 1}, "devices": ["cuda:1", None, "cuda:0"]})
    answer = kernel_side(space, "where", [torch.zeros(2), torch.ones(1, device="meta"), torch.ones(3)],
                         fake=faked)
    assert read_result("where", answer) == (
        [torch.device("cuda:1"), torch.device("meta"), torch.device("cuda:0")], (True, False), 1)


def test_a_fake_is_the_courses_own_code_named_module_colon_function():
    for name in ("os:system", "builtins:exec", "devicelab.exercises.ps01", "devicelab:a:b", "x.devicelab:f"):
        with pytest.raises(ValueError, match="course's own packages"):
            Fake(name)
    stand_in = StudentFunction("f", lambda name, payload: pytest.fail("nothing may cross"))
    with pytest.raises(CallFailed, match="the test asks for"):
        stand_in.in_kernel((), fake="subprocess:run")


def test_a_fake_the_kernel_cannot_set_up_fails_the_test():
    space = {"f": lambda: 1}
    for faked in (Fake("devicelab.exercises.ps01:no_such_fake"),
                  Fake("devicelab.exercises.calls:faked", {"gpus": 2})):
        with pytest.raises(CallFailed, match="could not set up the fake"):
            read_result("f", kernel_side(space, "f", [], fake=faked))


def test_the_arguments_come_back_as_the_kernel_holds_them_after_the_call_gradients_included():
    def spoils(t, scale, rows):
        t.grad = torch.full_like(t, scale)
        rows.append(t.detach() * 2)
        return "done"

    t = torch.ones(2, requires_grad=True)
    encoded = kernel_side({"spoils": spoils}, "spoils", [t, 3.0], {"rows": []}, keep=True)
    answer = read_answer("spoils", encoded)
    (after, scale), kwargs = answer.args, answer.kwargs
    assert answer.value == "done" and scale == 3.0 and t.grad is None, "copies cross, never the grader's own"
    assert after.requires_grad and torch.equal(after.grad, torch.full((2,), 3.0))
    assert torch.equal(kwargs["rows"][0], torch.full((2,), 2.0))
    plain = read_answer("spoils", kernel_side({"spoils": spoils}, "spoils", [t, 1.0], {"rows": []}))
    assert (plain.value, plain.args, plain.kwargs) == ("done", None, None), "only when the test asks"


def test_arguments_left_holding_what_is_not_plain_data_are_a_rejected_answer():
    space = {"plants": lambda rows: rows.append(lambda: 0) or 1,
             "lies": lambda rows: rows.append(AlwaysEqual())}
    for name in space:
        with pytest.raises(AnswerRejected, match="not plain data"):
            read_answer(name, kernel_side(space, name, [[]], keep=True))


@pytest.mark.parametrize("after", [([torch.zeros(2)], {}, []), ([torch.zeros(2)], {}, [torch.zeros(3)]),
                                   ([torch.zeros(2)], {}, [None, None]), ([], {}), "args"])
def test_arguments_whose_gradients_do_not_line_up_are_a_rejected_answer(after):
    import base64

    encoded = base64.b64encode(dumps(("returned", 1, after))).decode("ascii")
    with pytest.raises(AnswerRejected, match="did not come back"):
        read_answer("f", encoded)


# --- test runs ----------------------------------------------------------------------------------------------

def _caller(space: dict):
    return lambda name, payload: answer(space, name, payload)


def test_a_test_runs_here_and_only_the_students_functions_are_called_in_the_kernel():
    space = {"double": lambda x: 2 * x, "torch": "a stand-in the test never sees"}
    ns = {"__builtins__": __builtins__, "torch": torch}
    run = run_test("assert double(2) == 4\nassert torch.equal(double(torch.ones(2)), torch.full((2,), 2.0))",
                   ns, _caller(space), "double-tests")
    assert (run.status, run.outputs) == ("ok", [])


def test_a_failing_test_records_its_error_and_line():
    run = run_test("x = 1\nassert double(2) == 5, 'double(2) should be 4'", {},
                   _caller({"double": lambda x: 2 * x}), "t")
    assert run.status == "error"
    (error,) = run.outputs
    assert (error.ename, error.evalue) == ("AssertionError", "double(2) should be 4")
    assert error.traceback[0].startswith("Cell In[1], line 2")  # as IPython says it (redact.py reads it)
    assert failing_line(error) == 2


def test_a_rejected_answer_fails_a_test_that_expects_an_error():
    source = "try:\n    f()\nexcept Exception:\n    pass\nelse:\n    raise AssertionError('should raise')"
    run = run_test(source, {}, _caller({"f": lambda: AlwaysEqual()}), "t")
    assert run.status == "error" and run.outputs[-1].ename == "AnswerRejected"


def test_prints_and_a_last_expression_become_outputs():
    run = run_test("print('hi')\n0.5", {}, _caller({}), "t")
    assert run.status == "ok"
    assert [o.output_type for o in run.outputs] == ["stream", "execute_result"]
    assert run.outputs[1].data["text/plain"] == "0.5"


# --- the instructor's plan ----------------------------------------------------------------------------------

def _cell(source: str, nbgrader: dict | None = None, tags: list | None = None) -> dict:
    metadata = {**({"nbgrader": nbgrader} if nbgrader else {}), **({"tags": tags} if tags else {})}
    return {"cell_type": "code", "metadata": metadata, "source": source, "outputs": [],
            "execution_count": None}


def test_the_plan_takes_tagged_test_cells_and_the_locked_set_up_cells_from_the_instructors_notebook(tmp_path):
    nb = {"cells": [_cell("import torch\nSETUP = 1", {"locked": True, "grade_id": "imports"}),
                    _cell("x = 1"),  # not locked: the student's, never run here
                    _cell("def f(): ...", {"solution": True, "grade_id": "f", "locked": False}),
                    _cell("assert f() == 1", {"grade": True, "grade_id": "f-tests", "locked": True},
                          ["out-of-process"]),
                    _cell("assert f() == 2", {"grade": True, "grade_id": "f-tests-inside", "locked": True})],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb))
    plan = Plan.read(path)
    assert plan.tests == {"f-tests": "assert f() == 1"}
    space = plan.namespace()
    assert space["SETUP"] == 1 and space["torch"] is torch and "x" not in space
    space["SETUP"] = 2
    assert plan.namespace()["SETUP"] == 1, "each test gets a fresh copy"
    assert Plan.read(tmp_path / "missing.ipynb").tests == {}


# --- files a notebook wrote ---------------------------------------------------------------------------------

def test_written_files_come_back_regular_files_only_never_through_links(tmp_path):
    work, target, secret = tmp_path / "work", tmp_path / "autograded" / "foo" / "ps1", tmp_path / "secret"
    (work / "sub").mkdir(parents=True)
    target.mkdir(parents=True)
    secret.write_text("the grader's")
    (work / "side-effect.txt").write_text("a side effect")
    (work / "sub" / "data.csv").write_text("1,2")
    (work / "p1.ipynb").write_text("{}")  # never over the graded notebook
    (target / "p1.ipynb").write_text("graded")
    (work / "page.HTML").write_text("<script>alert(1)</script>")  # staff might open it: never copied
    (work / "sub" / "plot.svg").write_text("<svg onload='alert(1)'/>")
    os.symlink(secret, work / "link.txt")
    os.mkfifo(work / "pipe")
    os.symlink(secret, target / "planted.txt")  # a link already there is replaced, never written through
    (work / "planted.txt").write_text("new")
    placed = copy_written_files(work, target)
    assert sorted(placed) == ["planted.txt", "side-effect.txt", "sub/data.csv"]
    assert (target / "side-effect.txt").read_text() == "a side effect"
    assert (target / "sub" / "data.csv").read_text() == "1,2"
    assert (target / "p1.ipynb").read_text() == "graded"
    assert not (target / "link.txt").exists() and not (target / "pipe").exists()
    assert not (target / "page.HTML").exists() and not (target / "sub" / "plot.svg").exists()
    assert secret.read_text() == "the grader's" and not (target / "planted.txt").is_symlink()
    assert [p.name for p in target.parent.iterdir()] == ["ps1"], "the staging folder is gone"


def test_written_files_are_capped(tmp_path, monkeypatch):
    from autograder.grading import execution
    from autograder.safe_copy import Limits

    work, target = tmp_path / "work", tmp_path / "out" / "a"
    work.mkdir()
    target.mkdir(parents=True)
    for k in range(5):
        (work / f"f{k}.txt").write_text("x" * 100)
    monkeypatch.setattr(execution, "WRITTEN_FILES", Limits(file_bytes=1000, total_bytes=250, entries=10))
    assert len(copy_written_files(work, target)) == 2


def test_a_work_folder_that_is_a_link_is_not_read(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "x.txt").write_text("x")
    (tmp_path / "out" / "a").mkdir(parents=True)
    os.symlink(real, tmp_path / "work")
    assert copy_written_files(Path(tmp_path / "work"), tmp_path / "out" / "a") == []
