"""Lesson 09, devices in real code: each prediction's answer, and each figure its text quotes, is what
runs."""

import warnings

import nbformat
import pytest
import torch
from torch import nn

from autograder import COURSE_ROOT
from devicelab.exercises.lesson09 import PREDICTIONS
from devicelab.units import GiB, MiB

LESSON = COURSE_ROOT / "notebooks" / "09-devices-in-real-code.ipynb"


def _cell(cell_id: str) -> str:
    return next(c.source for c in nbformat.read(LESSON, as_version=4).cells if c.get("id") == cell_id)


def _lesson_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))


def _adam_state() -> str:
    """The question: the state right after Adam(...) is built. The 2 x that section 1 teaches next is
    checked here too: two averages of the parameters' size after the first step."""
    model = _lesson_model()
    optimizer = torch.optim.Adam(model.parameters())
    made = sum(v.numel() * v.element_size() for s in optimizer.state.values() for v in s.values()
               if torch.is_tensor(v))
    nn.functional.cross_entropy(model(torch.randn(64, 1024)), torch.randint(0, 10, (64,))).backward()
    optimizer.step()
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    averages = sum(v.numel() * v.element_size() for s in optimizer.state.values()
                   for k, v in s.items() if k != "step")
    assert averages == 2 * params, "section 1: after a step, Adam holds two averages of the parameters' size"
    if made == 0:
        return "none yet: Adam makes its state at the first step"
    return f"about {made / MiB:.0f} MiB"


def _autocast_dtypes() -> str:
    linear = nn.Linear(256, 256)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        out = linear(torch.randn(4, 256))
    weight, output = (str(t.dtype).removeprefix("torch.") for t in (linear.weight, out))
    return f"weight {weight}, output {output}"


def _optimizer_load_device() -> str:
    model = nn.Linear(4, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    saved = optimizer.state_dict()
    with torch.device("meta"):
        target = nn.Linear(4, 2)
    loaded = torch.optim.Adam(target.parameters())
    loaded.load_state_dict(saved)
    where = loaded.state[target.weight]["exp_avg"].device.type
    assert loaded.state[target.weight]["step"].device.type == "cpu", "the reason says step stays where it was"
    return {"meta": "on meta, the parameters' device", "cpu": "on the CPU, where it was saved"}[where]


ANSWERS = {"adam-state": _adam_state, "autocast-dtypes": _autocast_dtypes,
           "optimizer-load-device": _optimizer_load_device}


def test_every_prediction_is_checked_here():
    assert set(ANSWERS) == set(PREDICTIONS)


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_a_predictions_answer_is_what_running_it_shows(name):
    assert ANSWERS[name]() == PREDICTIONS[name].answer


def test_the_adam_question_quotes_the_lessons_model():
    model = _lesson_model()
    count = sum(p.numel() for p in model.parameters())
    size_mib = sum(p.numel() * p.element_size() for p in model.parameters()) / MiB
    assert f"{count / 1e6:.2f} million" in PREDICTIONS["adam-state"].question
    assert f"({size_mib:.1f} MiB)" in PREDICTIONS["adam-state"].question
    assert "nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)" in _cell("count-params")


def test_a_billion_float32_parameters_with_adam_take_about_15_gib():
    assert round(4 * 4 * 1e9 / GiB) == 15
    assert "about 15 GiB" in _cell("adam-state-after")


def test_the_cpu_allocator_raises_a_plain_runtime_error():
    with pytest.raises(RuntimeError) as caught:
        torch.empty(4 * 2**60, dtype=torch.uint8)
    assert not isinstance(caught.value, torch.OutOfMemoryError)
    assert torch.cuda.OutOfMemoryError is torch.OutOfMemoryError


def _deep_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(1024, 1024), nn.ReLU()) for _ in range(4)],
                         nn.Linear(1024, 10))


def _saves(model: nn.Module, run) -> list[tuple[int, int, int]]:
    """(storage address, storage bytes, rows) for each save autograd makes in run(), the weights left out."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = []

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            seen.append((storage.data_ptr(), storage.nbytes(), t.shape[0]))
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    return seen


def test_the_pack_hook_runs_once_per_save_so_section_2_counts_each_storage_once():
    """A ReLU's output is saved by the ReLU and again by the next Linear: 9 saves of 5 tensors at batch 64,
    2.25 MiB if the calls were added up against the 1.25 MiB really kept."""
    model = _deep_model()
    x = torch.randn(64, 1024)
    every = _saves(model, lambda: model(x))
    kept = {address: size for address, size, _ in every}
    assert (len(every), len(kept)) == (9, 5)
    assert sum(size for _, size, _ in every) == 2.25 * MiB and sum(kept.values()) == 1.25 * MiB
    for cell_id in ("saved-bytes", "autocast-memory-code"):
        assert "untyped_storage().data_ptr()" in _cell(cell_id) and "+=" not in _cell(cell_id), cell_id


def test_autocast_keeps_weight_copies_that_outweigh_small_activations():
    """Section 5's memory cell: activations halve, and the bfloat16 weight copies come on top (each storage
    counted once)."""
    model = _deep_model()
    x = torch.randn(64, 1024)

    def saved() -> tuple[int, int]:
        split = [{}, {}]
        for address, size, rows in _saves(model, lambda: model(x)):
            split[0 if rows == len(x) else 1][address] = size
        return sum(split[0].values()), sum(split[1].values())

    plain = saved()
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        mixed = saved()
    assert plain[1] == 0 and mixed[0] * 2 == plain[0] and mixed[1] > plain[0]


def test_module_to_keeps_parameters_between_dense_devices_and_not_to_meta():
    """Section 7: a dtype move keeps the Parameter objects (as CPU <-> CUDA does); meta makes new ones."""
    model = nn.Linear(2, 2)
    weight = model.weight
    model.to(torch.float64)
    assert model.weight is weight
    model.to("meta")
    assert model.weight is not weight


def test_autocast_for_cuda_without_a_gpu_warns_and_does_nothing():
    if torch.cuda.is_available():
        pytest.skip("shown only where there is no GPU")
    linear = nn.Linear(2, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autocast(device_type="cuda"):
            out = linear(torch.randn(1, 2))
    assert out.dtype == torch.float32 and caught


# ----------------------------------------------------------------------------------------------------------
# The practice exercise: state_devices

STATE_DEVICES_WRONG = {
    "reads-the-parameters": "def state_devices(optimizer):\n"
                            "    return {p.device for g in optimizer.param_groups for p in g['params']}",
    "keeps-step": "def state_devices(optimizer):\n"
                  "    return {v.device for s in optimizer.state.values() for v in s.values()}",
    "a-list": "def state_devices(optimizer):\n"
              "    return [v.device for s in optimizer.state.values() for k, v in s.items() if k != 'step']",
    "device-names": "def state_devices(optimizer):\n"
                    "    return {str(v.device) for s in optimizer.state.values()\n"
                    "            for k, v in s.items() if k != 'step'}",
}


def _practice(source: str) -> dict:
    namespace = {"torch": torch}
    exec(source, namespace)
    return namespace


def test_the_practice_solution_is_correct_and_the_notebook_stub_not_attempted():
    from devicelab.exercises.lesson09 import _exercises
    from devicelab.feedback import Outcome, evaluate

    exercise = _exercises.exercises["state_devices"]
    assert evaluate(exercise, _practice(exercise.solution)).outcome is Outcome.CORRECT
    stub = _practice(_cell("practice-state-devices"))
    assert evaluate(exercise, stub).outcome is Outcome.NOT_ATTEMPTED
    assert 'check("state_devices")' in _cell("practice-state-devices-check")


@pytest.mark.parametrize("name", sorted(STATE_DEVICES_WRONG))
def test_realistic_wrong_answers_to_the_practice_are_incorrect_with_what_to_fix(name):
    from devicelab.exercises.lesson09 import _exercises
    from devicelab.feedback import Outcome, evaluate

    feedback = evaluate(_exercises.exercises["state_devices"], _practice(STATE_DEVICES_WRONG[name]))
    assert feedback.outcome is Outcome.INCORRECT and "should" in feedback.message, str(feedback)


def test_cuda_visible_devices_indices_follow_cuda_device_order():
    """CUDA's indices are FASTEST_FIRST unless CUDA_DEVICE_ORDER=PCI_BUS_ID: not always nvidia-smi's order."""
    text = _cell("visible-devices")
    assert "as\n`nvidia-smi` numbers them" not in text
    assert "`CUDA_DEVICE_ORDER`: `FASTEST_FIRST` by default" in text and "PCI_BUS_ID" in text

