"""Every lesson runs top to bottom on this machine; GPU-only cells are marked so they can be skipped."""

import importlib
import math
import re
import warnings

import nbformat
import pytest
import torch

from autograder.colab_cells import SETUP_TAG
from autograder.course import lessons
from tests.notebook_runner import REQUIRES_CUDA, cuda_present, execute_notebook

LESSONS = lessons()
EXPECTED = ["00-start-here", "01-tensors", "02-devices"]


def test_lessons_exist_in_reading_order():
    names = [p.stem for p in LESSONS]
    assert names[: len(EXPECTED)] == EXPECTED
    assert names == sorted(names)


@pytest.mark.notebook
@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_lesson_runs_top_to_bottom(path):
    result = execute_notebook(path, gpu=cuda_present())
    errors = [c for c in result.notebook.cells if c.cell_type == "code"
              and any(o.get("output_type") == "error" for o in c.get("outputs", []))
              and "raises-exception" not in c.metadata.get("tags", [])]
    assert not errors


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_gpu_cells_carry_both_the_tag_and_the_magic(path):
    for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
        tagged = REQUIRES_CUDA in cell.metadata.get("tags", [])
        magic = cell.cell_type == "code" and cell.source.lstrip().startswith("%%requires_cuda")
        assert tagged == magic, (f"{path.name} cell {index}: tag `requires-cuda` and `%%requires_cuda` go "
                                 "together")


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_lesson_opens_with_imports_and_never_asserts_a_gpu(path):
    cells = nbformat.read(path, as_version=4).cells
    first_code = next(c for c in cells if c.cell_type == "code"
                      and SETUP_TAG not in c.metadata.get("tags", []))
    assert "import" in first_code.source, "the first code cell after the Colab setup cell holds the imports"
    text = "\n".join(c.source for c in cells)
    assert "assert torch.cuda.is_available()" not in text



def markdown_headings(path) -> list[str]:
    """Return every `#`-heading of a lesson's markdown cells, in order (headings may sit inside a cell)."""
    cells = nbformat.read(path, as_version=4).cells
    return [line for c in cells if c.cell_type == "markdown" for line in c.source.splitlines()
            if line.startswith("#")]


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_lesson_says_how_long_it_takes_and_ends_with_next(path):
    cells = nbformat.read(path, as_version=4).cells
    opening = next(c.source for c in cells if c.cell_type == "markdown" and c.source.startswith("# "))
    assert re.search(r"\*About \d+ minutes",
                     opening), f"{path.name}: the title cell says how long the lesson takes"
    headings = markdown_headings(path)
    assert headings[-1] == "## Next", f"{path.name}: the last section is '## Next'"
    if "## Going further (optional)" in headings:
        assert headings.index("## Going further (optional)") < headings.index("## Next")
        assert "optional" in opening, (f"{path.name}: the title cell says the Going further section is "
                                       "optional")


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_numbered_sections_run_in_order_and_references_to_them_exist(path):
    numbers = [int(m.group(1)) for h in markdown_headings(path) if (m := re.match(r"## (\d+)\. ", h))]
    assert numbers == list(range(1, len(numbers) + 1)), f"{path.name}: sections numbered {numbers}"
    text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    cited = {int(n) for n in re.findall(r"\bsections? (\d+)\b", text)}
    assert cited <= set(numbers), (f"{path.name}: refers to section(s) {sorted(cited - set(numbers))}, which "
                                   "it lacks")


PROMPT = "**Predict, then run:**"
ASK = re.compile(r'^\s*ask\("([^"]+)"\)\s*$')
GIVEAWAYS = {  # phrases that would answer a prediction if a student read them in the text before it
    "meta-matmul": ("trap", "uninitiali", "no error", "garbage"),
    "float64-matmul": ("what really goes wrong", "must have the same dtype", "mixing dtypes fails",
                       "mixing float64 and float32"),
    "queue-3000": ("limited depth", "queue is full", "free slot"),
    "default-h2d": ("stream sync", "the most common sync point"),
    "stale-read": ("dangerous direction", "stale", "last step's values", "not a sync point"),
    "built-with-cuda": ("whether or not a gpu is present", "*compiled* against", "how pytorch was *built*"),
    "default-device": ("create on the cpu", "does not move anything", "where are they stored?"),
    "numpy-dtype": ("keeps the dtype of a numpy array", "numpy's default float is 64-bit",
                    "arrives as `float64`"),
    "slice-storage": ("whole block stays", "stays allocated", "4,000,000 bytes of storage"),
    "cuda1-label": ("only a label", "not a connection", "nothing checks the hardware"),
    "cuda-vs-cuda0": ("*not* the same", "not equal", "has **no index**", "`none` is not `0`"),
    "current-accelerator": ("compiled** for", "compiled for", "a trap that reports a gpu",
                            "not one that is actually"),
    "same-object": ("sometimes **the very", "same tensor object", "returns `t` itself", "all three."),
    "moved-grad": ("trap", "stays `none`", "nothing ever updates it"),
    "numpy-shares": ("it does.", "`.cpu()` on a cpu tensor returns that same tensor"),
    "pageable-non-blocking": ("chunk by chunk", "is staged", "held until", "holds the host", "held the host"),
    "half-peak": ("between 32 kib and 64 kib", "31-36 kib", "half of the peak arrives"),
    "loader-device": ("leaves to you", "does not move it", "batches stay cpu tensors", "**either way the"),
    "one-stream-overlap": ("runs its work in order", "still waits for step", "current one computes",
                           "not on one stream"),
}


def _lesson_predictions(cells) -> dict:
    """Return the PREDICTIONS of the lesson module the notebook imports `ask` from ({} when it asks none)."""
    source = "\n".join(c.source for c in cells if c.cell_type == "code")
    match = re.search(r"from (devicelab\.exercises\.lesson\d+) import [^\n]*\bask\b", source)
    return importlib.import_module(match.group(1)).PREDICTIONS if match else {}


ASKS_TO_PREDICT = re.compile(  # "Predict ...", "a prediction first", "Guess ...", "What do you expect ..."
    r"\bpredict(ion|ions)?\b|(^|[.:!?>*]\s*)guess\b|what do you (expect|think)|\bthink (first|before)\b",
    re.IGNORECASE | re.MULTILINE)
# "1. Predict ..., then check": the student's own experiment, no cell answers it
PRACTICE_ITEM = re.compile(r"^\s*\d+\.\s")


def _prediction_prompts(cells) -> list[tuple[int, str]]:
    """Return (cell index, paragraph) for every paragraph of the lesson's text that asks the student to
    predict.

    The title cell's outline ("each question comes with a prediction") and numbered practice items, which the
    student answers with their own code, ask nothing of the cell that follows.
    """
    prompts = []
    for index, cell in enumerate(cells):
        if cell.cell_type != "markdown" or cell.source.startswith("# "):
            continue
        for paragraph in re.split(r"\n\s*\n", cell.source.strip()):
            if ASKS_TO_PREDICT.search(paragraph) and not PRACTICE_ITEM.match(paragraph):
                prompts.append((index, paragraph))
    return prompts


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_prediction_is_asked_before_anything_answers_it(path):
    """Every request to predict ends its markdown cell and is followed at once by an `ask` cell, then the
    answer.
    """
    cells = nbformat.read(path, as_version=4).cells
    prompts = _prediction_prompts(cells)
    assert all(index in {i for i, _ in prompts} for index, c in enumerate(cells)
               if c.cell_type == "markdown"
               and PROMPT in c.source), f"{path.name}: a prompt was not recognised"
    for index, paragraph in prompts:
        where = f"{path.name} cell {index} ({paragraph[:50]!r}...)"
        last = re.split(r"\n\s*\n", cells[index].source.strip())[-1]
        assert paragraph == last, f"{where}: text follows the prediction"
        following = cells[index + 1] if index + 1 < len(cells) else None
        assert following is not None and following.cell_type == "code" and ASK.match(following.source), (
            f"{where}: a request to predict is followed at once by its `ask(...)` cell (devicelab.predict), "
            "so that the answer shows only after the student has committed a guess")
        answering = index + 2
        while answering < len(cells) and cells[answering].cell_type == "code" and ASK.match(
            cells[answering].source):
            answering += 1  # several predictions about one cell are asked one after the other
        assert answering < len(cells) and cells[answering].cell_type == "code", (
            f"{where}: the answering cell follows the ask() cell(s) at once")


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_no_cell_before_an_ask_gives_its_answer_away(path):
    cells = nbformat.read(path, as_version=4).cells
    predictions = _lesson_predictions(cells)
    asked = [(i, m.group(1)) for i,
             c in enumerate(cells) if c.cell_type == "code" and (m := ASK.match(c.source))]
    for index, name in asked:
        assert name in predictions, f"{path.name} asks {name!r}, which its lesson module lacks"
        before = "\n".join(c.source for c in cells[:index] if c.cell_type == "markdown")
        answer = predictions[name].answer
        phrases = (*GIVEAWAYS.get(name, ()), *((answer,) if len(answer) > 12 else ()))
        for phrase in phrases:
            assert phrase.lower() not in before.lower(), (
                f"{path.name}: {phrase!r} appears before ask({name!r}) and answers it")
    assert sorted(n for _, n in asked) == sorted(predictions), f"{path.name}: every prediction is asked once"


SIMULATED_CALLS = {  # a call on the course's simulated GPU -> ways to write the PyTorch call it stands for
    r"\bgpu\.copy\(": (".to(device", "copy_(", ".to(\"cuda\""),
    r"\bgpu\.to_cpu\(": (".to(\"cpu\"", ".cpu()", "copy_("),
    r"\b(gpu|eager)\.launch\(": ("@ ", "torch.", "model(", ".add_(", "backward"),
    r"\bgpu\.event\(": ("torch.cuda.Event(",),
    r"\bnew_stream\(": ("torch.cuda.Stream(",),
    r"\bgpu\.stream\(": ("torch.cuda.stream(",),
    r"\bgpu\.current_stream\.wait_stream\(": ("torch.cuda.current_stream().wait_stream(",),
    r"\b(gpu|fresh|eager|graph)\.synchronize\(": ("torch.cuda.synchronize()",),
    r"\bgpu\.item\(": (".item()",),
    r"\blaunch_graph\(": ("torch.cuda.CUDAGraph(", "torch.cuda.graph(", ".replay()"),
    r"\bSimProfiler\(": ("torch.profiler.profile(",),
    r"\bprofile_script\(": ("torch.profiler.profile(", "torch.cuda.synchronize()"),
    r"\bexample_step\(": ("torch.profiler.profile(",),
}
WITH_THEIR_CALLS = [p for p in LESSONS if p.stem[:2] in ("07", "08")]


@pytest.mark.parametrize("path", WITH_THEIR_CALLS, ids=lambda p: p.stem)
def test_every_simulated_figure_sits_next_to_the_pytorch_call_it_stands_for(path):
    """A cell that drives the simulated GPU shows, in itself or the markdown beside it, the real PyTorch call.
    """
    cells = nbformat.read(path, as_version=4).cells
    missing = []
    for index, cell in enumerate(cells):
        if cell.cell_type != "code" or REQUIRES_CUDA in cell.metadata.get("tags", []):
            continue
        before = next((c.source for c in reversed(cells[:index]) if c.cell_type == "markdown"), "")
        after = cells[index + 1].source if index + 1 < len(cells) and cells[
            index + 1].cell_type == "markdown" else ""
        beside = f"{before}\n{cell.source}\n{after}"
        missing += [f"cell {index} ({cell.get('id')}): `{simulated}` without one of {real}"
                    for simulated, real in SIMULATED_CALLS.items()
                    if re.search(simulated, cell.source) and not any(spelling in beside for spelling in real)]
    assert not missing, (f"{path.name}: these cells drive the simulated GPU, but neither the cell nor the "
                         "markdown beside it shows the PyTorch call each stands for:\n" + "\n".join(missing))


def _numpy_dtype() -> str:
    import numpy as np

    from_list, from_numpy = (str(t.dtype).removeprefix("torch.") for t in
                             (torch.tensor([1.0, 2.0]), torch.tensor(np.array([1.0, 2.0]))))
    if from_list == from_numpy:
        return f"yes, both {from_list}"
    return f"no: {from_list} from the list, {from_numpy} from NumPy"


def _slice_storage() -> str:
    small = torch.zeros(1_000_000)[:2]
    return f"{small.nbytes:,} and {small.untyped_storage().nbytes():,}"


def _built_with_cuda() -> str:
    from devicelab.environment import collect_environment

    report = collect_environment()
    if report.cuda_available or not report.torch_cuda_build:
        pytest.skip("shown only by a CUDA build of PyTorch on a machine without a usable GPU")
    return "yes"


def _current_accelerator() -> str:
    if torch.cuda.is_available() or torch.version.cuda is None:
        pytest.skip("shown only by a CUDA build of PyTorch on a machine without a usable GPU")
    assert torch.accelerator.current_accelerator(check_available=True) is None, "the reason says None"
    return f"`{torch.accelerator.current_accelerator()!r}`"


def _same_object() -> str:
    x = torch.arange(6.0).reshape(2, 3)
    same = [x.cpu() is x, x.to("cpu") is x, x.to(torch.float32) is x]
    return "all three" if all(same) else f"only {same}"


def _moved_grad() -> str:
    w = torch.randn(3, requires_grad=True)
    w64 = w.to(torch.float64)
    (w64 ** 2).sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return "`None`" if w64.grad is None else repr(w64.grad)


def _numpy_shares() -> str:
    t = torch.zeros(3)
    t.detach().cpu().numpy()[1] = 7.0
    return "yes" if t[1].item() == 7.0 else "no"


def _pageable_non_blocking() -> str:
    from devicelab.simgpu import SimulatedGPU

    held = {}
    for pinned in (True, False):
        gpu = SimulatedGPU(initialized=True)
        gpu.copy(64 * 2**20, "h2d", pinned=pinned, non_blocking=True)
        held[pinned] = gpu.clock() / gpu.profile.copy_seconds(64 * 2**20, "h2d", pinned)
    assert held[True] < 0.01, "from pinned memory the call only queues the copy"
    return "no: the host is held while the data is staged" if held[False] > 0.9 else f"held {held[False]:.0%}"


def _half_peak() -> str:
    from devicelab.simgpu import T4_PCIE3

    # bytes at which latency and transfer take as long
    half = T4_PCIE3.h2d_pinned_Bps * T4_PCIE3.copy_latency_s
    sizes = {"4 KiB": 4 * 2**10, "32 KiB": 32 * 2**10, "1 MiB": 2**20, "16 MiB": 16 * 2**20}
    return min(sizes, key=lambda label: abs(math.log(sizes[label] / half)))


def _loader_device() -> str:
    from torch.utils.data import DataLoader, TensorDataset

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x, _ = next(iter(DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4,
                                    pin_memory=True)))
    return "on the CPU" if x.device.type == "cpu" else f"on {x.device}"


def _one_stream_overlap() -> str:
    from devicelab.overlap import compare

    same_stream = next(r for r in compare(steps=4) if "same stream" in r.label)
    return "no" if same_stream.overlap_s() == 0 else f"{same_stream.overlap_s()} s"


ANSWERS_HERE = {  # each prediction of lessons 00-03 and 06, answered by running it on this machine
    "lesson00": {"built-with-cuda": _built_with_cuda},
    "lesson01": {
        "default-device": lambda: "on the CPU"
        if {f(3).device.type for f in (torch.zeros, torch.arange, torch.randn)}
        == {"cpu"} else "elsewhere",
        "numpy-dtype": _numpy_dtype,
        "slice-storage": _slice_storage,
    },
    "lesson02": {
        "cuda1-label": lambda: "yes" if torch.device("cuda:1").index == 1 else "no",
        "cuda-vs-cuda0": lambda: str(torch.device("cuda") == torch.device("cuda:0")),
        "current-accelerator": _current_accelerator,
    },
    "lesson03": {"same-object": _same_object, "moved-grad": _moved_grad, "numpy-shares": _numpy_shares},
    "lesson06": {"pageable-non-blocking": _pageable_non_blocking, "half-peak": _half_peak,
                 "loader-device": _loader_device, "one-stream-overlap": _one_stream_overlap},
}


@pytest.mark.parametrize(("module", "name"), [(m, n) for m, names in ANSWERS_HERE.items() for n in names],
                         ids=lambda v: v)
def test_a_predictions_answer_is_what_running_it_shows(module, name):
    predictions = importlib.import_module(f"devicelab.exercises.{module}").PREDICTIONS
    assert set(predictions) == set(ANSWERS_HERE[module]), f"{module}: every prediction is checked here"
    assert ANSWERS_HERE[module][name]() == predictions[name].answer, (f"{module} {name}: the answer is not "
                                                                      "what runs")
