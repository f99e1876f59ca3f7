"""ps08-several-devices: the solutions and other correct answers earn full marks; realistic mistakes lose
points.

The mistakes came first, written down from how people get a data-parallel job, a checkpoint from another
GPU and DataLoader workers wrong (the table below, one row per entry of MISTAKES; "caught by" names the test
cell), then the hidden tests that catch them, then the other correct answers that must still get full marks.

| exercise | mistake | on GPUs | caught by |
| --- | --- | --- | --- |
| fixed_train | the script as given (rank 0 alone all-reduces, no sampler) | hangs at once | every cell |
| fixed_train | the collective fixed, the sampler left out | both GPUs train on the same samples | `-shards` |
| fixed_train | no `set_epoch`, or `set_epoch` after the epoch | every epoch replays one order | `-shards` |
| fixed_train | `DistributedSampler(shuffle=False)` | the same order every epoch | `-shards` |
| fixed_train | the sampler seeded with the rank | the shards overlap | `-shards` |
| fixed_train | `barrier()` on the other ranks for rank 0's all-reduce | hangs | every cell |
| fixed_train | each rank logs its own loss | rank 0's log is half the story | `-losses` |
| fixed_train | the sum logged as the mean, or divided by 2 | a wrong loss (3+ GPUs) | `-losses` |
| fixed_train | the last batch's loss logged | a noisy log | `-losses` |
| fixed_train | no DDP (nothing averages the gradients) | the ranks drift apart | `-weights` |
| fixed_train | gradients all-reduced by hand, not divided | twice the learning rate | `-weights` |
| fixed_train | the global batch of 4 split over the ranks | another job than the one asked | `-weights` |
| load_for_one | no `map_location` | does not load without that GPU | `-gpu-file` |
| load_for_one | the DDP tutorial's `{"cuda:0": device}` | `cuda:1` storages stay on GPU 1 | `-gpu-file` |
| load_for_one | `weights_only=False` | a hostile file runs code | `-safe` |
| load_for_one | keys kept with `module.` | `load_state_dict` refuses them | `-values` |
| load_for_one | `strict=False` to quiet the error | loads nothing, says nothing | `-values` |
| load_for_one | `key[7:]` always | breaks a file saved from `model.module` | `-values` |
| load_for_one | `key.replace("module.", "")`, `key.lstrip("module.")` | breaks other names | `-values` |
| load_for_one | `map_location=device`, model never moved | the model stays on the CPU | `-device` |
| load_for_one | returns the state dict | the caller's model holds nothing | `-values` |
| fixed_batches | the dataset as given (each sample to the device) | the fork error | `-workers` |
| fixed_batches | a `collate_fn` that moves the batch | the fork error (collate runs there) | `-workers` |
| fixed_batches | labels made with `device=` in `__getitem__` | the fork error | `-workers` |
| fixed_batches | the whole data set moved first | the workers index GPU tensors | `-workers` |
| fixed_batches | `num_workers=0` | no error, no parallel loading | `-workers` |
| fixed_batches | only `x` moved | the loss mixes devices | `-device` |
| fixed_batches | not divided by 255, no shuffle, `drop_last=True` | other data than asked | `-batches` |

`multiprocessing_context="spawn"` (what the error message suggests) is left out: it starts a fresh Python per
worker (seconds each), and the `-workers` cell fails it either way, where the dataset's class lives in a
notebook cell (spawn cannot import it) or moves samples to the device.

Each mistake and other correct answer runs the imports cell and its own exercise's cells only (DDP jobs and
worker processes cost time); `TestContract`'s tests run the whole notebook, and show that each exercise's
points depend on its own answer alone.
"""

import multiprocessing
import time

import nbformat
import pytest
from nbgrader import utils

from autograder import COURSE_ROOT
from autograder.cells import grade_id
from tests import assignment_support as support
from tests.harness import run_graded_cells, score

NOTEBOOK = COURSE_ROOT / "source" / "ps08-several-devices" / "ps08-several-devices.ipynb"
CELLS_OF = {
    "fixed-train": ("fixed-train-tests-runs", "fixed-train-tests-shards", "fixed-train-tests-weights",
                    "fixed-train-tests-losses"),
    "load-for-one": ("load-for-one-tests-values", "load-for-one-tests-gpu-file", "load-for-one-tests-device",
                     "load-for-one-tests-safe"),
    "fixed-batches": ("fixed-batches-tests-workers", "fixed-batches-tests-batches",
                      "fixed-batches-tests-device"),
}
POINTS_OF = {"fixed-train": 12, "load-for-one": 10, "fixed-batches": 10}
TOTAL = sum(POINTS_OF.values())
HEADS = {
    "fixed-train": ("def fixed_train(rank: int, world_size: int, data: Dataset, epochs: int):\n"
                    "    \"\"\"Train.\"\"\"\n"),
    "load-for-one": "def load_for_one(path, model: nn.Module, device) -> nn.Module:\n    \"\"\"Load.\"\"\"\n",
    "fixed-batches": ("def fixed_batches(images: torch.Tensor, labels: torch.Tensor, device, "
                      "batch_size: int = 64, num_workers: int = 2):\n    \"\"\"Batches.\"\"\"\n"),
}


def cell(exercise: str, body: str) -> str:
    """Return a solution cell for `exercise` whose body is `body` (written flush left)."""
    return support.function_cell(HEADS[exercise], body)


class TestContract(support.AssignmentContract):
    NOTEBOOK, CELLS_OF, POINTS_OF, HEADS = NOTEBOOK, CELLS_OF, POINTS_OF, HEADS


@pytest.fixture(scope="module")
def one_exercise(tmp_path_factory):
    """Return {exercise: a copy of the notebook holding only the imports cell and that exercise's cells}."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    folder = tmp_path_factory.mktemp("ps08-parts")
    paths = {}
    for exercise, cells in CELLS_OF.items():
        keep = {"imports", exercise, *cells}
        cells = [c for c in nb.cells
                 if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade_id") in keep]
        part = nbformat.from_dict(dict(nb, cells=cells))
        paths[exercise] = folder / f"{exercise}.ipynb"
        nbformat.write(part, paths[exercise])
    return paths


def test_imports_and_check_calls():
    code = support.code_cells(NOTEBOOK)
    assert "from devicelab.exercises.ps08 import" in support.imports_cell(code).source
    checks = [c.source.split(")")[0] for c in code if c.source.startswith("check(")]
    assert checks == ['check("fixed_train"', 'check("load_for_one"', 'check("fixed_batches"']


# ----------------------------------------------------------------------------------------------------------
# The reference answers, one piece at a time, so that each mistake changes one thing.

def train_with(model="DDP(small_model())", sampler="DistributedSampler(data, shuffle=True)",
               loader="DataLoader(data, batch_size=4, sampler=sampler)", start="sampler.set_epoch(epoch)",
               end="pass", log="dist.all_reduce(mean)\nmean /= world_size", after_backward="pass",
               loss_of_epoch="total / len(loader)") -> str:
    log = log.replace("\n", "\n    ")
    after_backward = after_backward.replace("\n", "\n        ")
    return cell("fixed-train", f"""
model = {model}
sampler = {sampler}
loader = {loader}
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
losses = []
for epoch in range(epochs):
    {start}
    total = torch.zeros(())
    for x, y in loader:
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        {after_backward}
        optimizer.step()
        total += loss.detach()
    mean = {loss_of_epoch}
    {log}
    if rank == 0:
        print(f"epoch {{epoch}}: loss {{mean.item():.4f}}")
    losses.append(mean.item())
    {end}
return model, losses
""")


def load_with(load="torch.load(path, map_location=device, weights_only=True)",
              key='key.removeprefix("module.")', move="model.to(device)",
              into="model.load_state_dict(state)", result="model") -> str:
    return cell("load-for-one", f"""
saved = {load}
state = {{{key}: value for key, value in saved["model"].items()}}
{move}
{into}
return {result}
""")


def batches_with(dataset="TensorDataset(images, labels)", options="shuffle=True",
                 workers="num_workers", move="x.to(device).float() / 255, y.to(device)", before="") -> str:
    return cell("fixed-batches", f"""
{before}
loader = DataLoader({dataset}, batch_size=batch_size, {options}, num_workers={workers})
for x, y in loader:
    yield {move}
""")


GIVEN_TRAIN = cell("fixed-train", """
model = DDP(small_model())
loader = DataLoader(data, batch_size=4, shuffle=True)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
losses = []
for epoch in range(epochs):
    total = torch.zeros(())
    for x, y in loader:
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.detach()
    mean = total / len(loader)
    if rank == 0:
        dist.all_reduce(mean)
        mean /= world_size
        print(f"epoch {epoch}: loss {mean.item():.4f}")
    losses.append(mean.item())
return model, losses
""")

ON_DEVICE_SAMPLES = """class OnDevice(Dataset):
    def __init__(self, images, labels):
        self.images, self.labels = images, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        {get}
"""


def samples_with(get: str) -> str:
    return ON_DEVICE_SAMPLES.format(get=get.replace("\n", "\n        "))


def batches_from_samples(get: str, **changes) -> str:
    """Return an answer whose dataset class, defined in the function, reads samples with `get`."""
    return batches_with(before=samples_with(get), dataset="OnDevice(images, labels)", **changes)


# ----------------------------------------------------------------------------------------------------------
# Other correct answers get full marks

CORRECT = {
    "fixed-train": {
        "explicit-ranks-other-seed": train_with(
            sampler="DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=7)"),
        "module-returned-losses-gathered-at-the-end": cell("fixed-train", """
ddp = DDP(small_model())
sampler = DistributedSampler(data)
optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
means = torch.zeros(epochs)
for epoch in range(epochs):
    sampler.set_epoch(epoch)
    batch_losses = []
    for x, y in DataLoader(data, batch_size=4, sampler=sampler):
        optimizer.zero_grad()
        loss = nn.MSELoss()(ddp(x), y)
        loss.backward()
        optimizer.step()
        batch_losses.append(loss.item())
    means[epoch] = sum(batch_losses) / len(batch_losses)
dist.all_reduce(means, op=dist.ReduceOp.SUM)      # once, after the last epoch, on every rank
return ddp.module, (means / dist.get_world_size()).tolist()
"""),
        "gradients-averaged-by-hand": cell("fixed-train", """
model = small_model()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
losses = []
for epoch in range(epochs):
    order = torch.randperm(len(data), generator=torch.Generator().manual_seed(epoch)).tolist()
    loader = DataLoader(torch.utils.data.Subset(data, order[rank::world_size]), batch_size=4)
    total, steps = torch.zeros(()), 0
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world_size
        optimizer.step()
        total += loss.detach()
        steps += 1
    summed = total / steps
    dist.all_reduce(summed)
    losses.append(float(summed) / world_size)
return model, losses
"""),
        "fixed-shards-reshuffled": train_with(
            sampler="torch.utils.data.Subset(data, range(rank, len(data), world_size))",
            loader="DataLoader(sampler, batch_size=4, shuffle=True)", start="pass",
            log="dist.all_reduce(mean)\nmean = mean / world_size"),
    },
    "load-for-one": {
        "consume-prefix": cell("load-for-one", """
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

state = torch.load(path, map_location="cpu", weights_only=True)["model"]
consume_prefix_in_state_dict_if_present(state, "module.")
model.load_state_dict(state)
return model.to(device)
"""),
        "map-location-function-then-move": load_with(
            load="torch.load(path, map_location=lambda storage, location: storage, weights_only=True)",
            key='key[len("module."):] if key.startswith("module.") else key', move="pass",
            into="model.load_state_dict(state)\nmodel.to(torch.device(device))"),
        "a-holder-named-module": cell("load-for-one", """
state = torch.load(path, map_location=torch.device(device), weights_only=True)["model"]
model.to(device)
if all(key.startswith("module.") for key in state):
    holder = nn.Module()
    holder.module = model
    holder.load_state_dict(state)
else:
    model.load_state_dict(state)
return model
"""),
        "move-then-assign": load_with(into="model.load_state_dict(state, assign=True)"),
        "assign-then-move": load_with(load='torch.load(path, map_location="cpu", weights_only=True)',
                                      key='key.split("module.", 1)[1] if key.startswith("module.") else key',
                                      move="pass",
                                      into="model.load_state_dict(state, assign=True)\nmodel.to(device)"),
    },
    "fixed-batches": {
        "a-cpu-dataset-pinned-non-blocking": batches_from_samples(
            "return self.images[index].float() / 255, self.labels[index]",
            options='shuffle=True, pin_memory=torch.device(device).type == "cuda"',
            move="x.to(device, non_blocking=True), y.to(device, non_blocking=True)"),
        "collate-on-the-cpu": batches_with(
            options=("shuffle=True, collate_fn=lambda samples: (torch.stack([s[0] for s in samples]).float() "
                     "/ 255, torch.stack([s[1] for s in samples]))"),
            move="x.to(device), y.to(device)"),
        "uint8-moved-then-divided": batches_with(move="x.to(device) / 255, y.to(device)"),
        "an-iterable-object": cell("fixed-batches", """
class OnTheWay:
    def __init__(self):
        self.loader = DataLoader(TensorDataset(images, labels), batch_size=batch_size, shuffle=True,
                                 num_workers=num_workers, persistent_workers=num_workers > 0)

    def __iter__(self):
        return ((x.to(device).to(torch.float32).div(255), y.to(device)) for x, y in self.loader)

return OnTheWay()
"""),
    },
}


def _correct_cases():
    return [pytest.param(gid, src, id=f"{gid}-{name}") for gid, answers in CORRECT.items()
            for name, src in answers.items()]


@pytest.mark.parametrize(("exercise", "source"), _correct_cases())
def test_other_correct_answers_get_full_marks(one_exercise, exercise, source):
    support.assert_all_pass(run_graded_cells(one_exercise[exercise], replace={exercise: source}))


# ----------------------------------------------------------------------------------------------------------
# Realistic mistakes lose points

MISTAKES = {
    ("fixed-train", "as-given"): GIVEN_TRAIN,
    ("fixed-train", "no-sampler"): train_with(
        sampler="None", loader="DataLoader(data, batch_size=4, shuffle=True)", start="pass"),
    ("fixed-train", "no-set-epoch"): train_with(start="pass"),
    ("fixed-train", "set-epoch-after-the-epoch"): train_with(start="pass", end="sampler.set_epoch(epoch)"),
    ("fixed-train", "sampler-without-shuffle"): train_with(sampler="DistributedSampler(data, shuffle=False)"),
    ("fixed-train", "sampler-seeded-with-the-rank"): train_with(
        sampler="DistributedSampler(data, shuffle=True, seed=rank)"),
    ("fixed-train", "barrier-for-the-others"): train_with(
        log="if rank == 0:\n    dist.all_reduce(mean)\n    mean /= world_size\nelse:\n    dist.barrier()"),
    ("fixed-train", "own-loss-per-rank"): train_with(log="pass"),
    ("fixed-train", "sum-as-mean"): train_with(log="dist.all_reduce(mean)"),
    ("fixed-train", "divided-by-two"): train_with(log="dist.all_reduce(mean)\nmean /= 2"),
    ("fixed-train", "last-batch-loss"): train_with(loss_of_epoch="loss.detach().clone()"),
    ("fixed-train", "no-ddp"): train_with(model="small_model()"),
    ("fixed-train", "gradients-summed-by-hand"): train_with(
        model="small_model()", after_backward="for p in model.parameters():\n    dist.all_reduce(p.grad)"),
    ("fixed-train", "global-batch-split"): train_with(
        loader="DataLoader(data, batch_size=4 // world_size or 1, sampler=sampler)"),
    ("load-for-one", "no-map-location"): load_with(load="torch.load(path, weights_only=True)"),
    ("load-for-one", "tutorial-dict"): load_with(
        load='torch.load(path, map_location={"cuda:0": str(device)}, weights_only=True)'),
    ("load-for-one", "dict-for-the-jobs-two-gpus"): load_with(  # the two GPUs it was told of, not any GPU
        load='torch.load(path, map_location={"cuda:0": str(device), "cuda:1": str(device)}, '
             'weights_only=True)'),
    ("load-for-one", "weights-only-false"): load_with(
        load="torch.load(path, map_location=device, weights_only=False)"),
    ("load-for-one", "keeps-the-prefix"): load_with(key="key"),
    ("load-for-one", "strict-false"): load_with(key="key", into="model.load_state_dict(state, strict=False)"),
    ("load-for-one", "slices-seven"): load_with(key="key[7:]"),
    ("load-for-one", "replaces-everywhere"): load_with(key='key.replace("module.", "")'),
    ("load-for-one", "replaces-once"): load_with(key='key.replace("module.", "", 1)'),
    ("load-for-one", "lstrip"): load_with(key='key.lstrip("module.")'),
    ("load-for-one", "never-moves-the-model"): load_with(move="pass"),
    ("load-for-one", "returns-the-state"): load_with(result="state"),
    ("fixed-batches", "as-given"): batches_from_samples(
        "return self.images[index].to(device).float() / 255, self.labels[index].to(device)", move="x, y"),
    ("fixed-batches", "collate-moves"): batches_with(
        options=("shuffle=True, collate_fn=lambda samples: [t.to(device) for t in "
                 "torch.utils.data.default_collate(samples)]"), move="x.float() / 255, y"),
    ("fixed-batches", "labels-made-on-the-device"): batches_from_samples(
        "return self.images[index], torch.tensor(int(self.labels[index]), device=device)",
        move="x.to(device).float() / 255, y"),
    ("fixed-batches", "data-moved-first"): batches_with(
        before="images, labels = images.to(device), labels.to(device)"),
    ("fixed-batches", "no-workers"): batches_with(workers="0"),
    ("fixed-batches", "labels-stay-behind"): batches_with(move="x.to(device).float() / 255, y"),
    ("fixed-batches", "not-scaled"): batches_with(move="x.to(device).float(), y.to(device)"),
    ("fixed-batches", "not-shuffled"): batches_with(options="shuffle=False"),
    ("fixed-batches", "drops-the-last-batch"): batches_with(options="shuffle=True, drop_last=True"),
}


def _mistake_cases():
    return [pytest.param(gid, src, id=f"{gid}-{name}") for (gid, name), src in MISTAKES.items()]


HANGS = {("fixed-train", "barrier-for-the-others")}  # each DDP run waits out its time limit


@pytest.mark.parametrize(("exercise", "source"), _mistake_cases())
def test_mistake_loses_points(one_exercise, exercise, source, request, monkeypatch):
    from devicelab.exercises import ps08

    if any(request.node.callspec.id == f"{gid}-{name}" for gid, name in HANGS):
        monkeypatch.setattr(ps08, "TIME_LIMIT_S", 2.5)  # a hang fails either way; sooner here
    results = run_graded_cells(one_exercise[exercise], replace={exercise: source})
    support.assert_runs(source, results)
    assert support.failing(results), (
        f"not caught by {' or '.join(CELLS_OF[exercise])}: {support.report(results)}")
    assert score(results)[0] < POINTS_OF[exercise]


@pytest.mark.parametrize(("mistake", "cell_id", "words"), [
    (("fixed-train", "as-given"), "fixed-train-tests-runs", "collective mismatch"),
    (("fixed-train", "no-sampler"), "fixed-train-tests-shards", "read 64 samples in 2 epochs, not 32"),
    (("fixed-train", "sampler-seeded-with-the-rank"), "fixed-train-tests-shards", "more than once"),
    (("fixed-train", "no-set-epoch"), "fixed-train-tests-shards", "same order in two epochs"),
    (("fixed-train", "sum-as-mean"), "fixed-train-tests-losses", "the same mean on every rank"),
    (("fixed-train", "no-ddp"), "fixed-train-tests-weights", "weights differ after training"),
    (("fixed-train", "gradients-summed-by-hand"), "fixed-train-tests-weights",
     "mean of the ranks' gradients"),
    (("load-for-one", "no-map-location"), "load-for-one-tests-gpu-file",
     "loading a file saved on cuda:1 failed: Attempting to deserialize object on a CUDA device"),
    (("load-for-one", "keeps-the-prefix"), "load-for-one-tests-gpu-file", "Missing key(s) in state_dict"),
    (("load-for-one", "strict-false"), "load-for-one-tests-values", "the model was not loaded from it"),
    (("load-for-one", "slices-seven"), "load-for-one-tests-values", "no prefix"),
    (("load-for-one", "weights-only-false"), "load-for-one-tests-safe", "weights_only=True"),
    (("load-for-one", "never-moves-the-model"), "load-for-one-tests-device",
     "after loading onto meta: 0.weight is on cpu, not on meta"),
    (("fixed-batches", "as-given"), "fixed-batches-tests-workers", "Cannot re-initialize CUDA in forked"),
    (("fixed-batches", "collate-moves"), "fixed-batches-tests-workers", "a worker touched the device"),
    (("fixed-batches", "no-workers"), "fixed-batches-tests-workers", "0 workers read samples"),
    (("fixed-batches", "not-shuffled"), "fixed-batches-tests-batches", "shuffled"),
])
def test_failures_say_what_to_fix(one_exercise, mistake, cell_id, words):
    results = run_graded_cells(one_exercise[mistake[0]], replace={mistake[0]: MISTAKES[mistake]})
    assert not results[cell_id].passed and words in results[cell_id].error, support.report(results)


# ----------------------------------------------------------------------------------------------------------
# Instant feedback and the stand-ins


def _namespace(sources: list[str]) -> dict:
    namespace: dict = {}
    imports = support.imports_cell(support.code_cells(NOTEBOOK)).source
    exec(imports, namespace)
    for source in sources:
        exec(source, namespace)
    return namespace


def test_feedback_checks_say_correct_for_the_solution_and_not_attempted_for_stubs():
    from devicelab.exercises import ps08
    from devicelab.feedback import Outcome, evaluate

    namespace = _namespace([c.source for c in support.code_cells(NOTEBOOK) if utils.is_solution(c)])
    for exercise in ps08._exercises.exercises.values():
        assert evaluate(exercise, namespace).outcome is Outcome.CORRECT, str(evaluate(exercise, namespace))
    stubs = _namespace(list(support.student_stubs(NOTEBOOK).values()))
    for exercise in ps08._exercises.exercises.values():
        assert evaluate(exercise, stubs).outcome is Outcome.NOT_ATTEMPTED


@pytest.mark.parametrize(("mistake", "words"), [
    (("fixed-train", "as-given"), "NCCL"),
    (("fixed-train", "no-set-epoch"), "reshuffled"),
    (("load-for-one", "keeps-the-prefix"), "Missing key(s) in state_dict"),
    (("load-for-one", "replaces-everywhere"), "block.module.weight"),
    (("load-for-one", "slices-seven"), "from model.module"),
    (("load-for-one", "never-moves-the-model"), "is on cpu, not on meta"),
    (("load-for-one", "strict-false"), "the model was not loaded from it"),
    (("load-for-one", "weights-only-false"), "weights_only=True"),
    (("fixed-batches", "as-given"), "touched the device"),
    (("fixed-batches", "no-workers"), "worker processes"),
])
def test_feedback_checks_catch_the_common_mistakes(mistake, words):
    from devicelab.exercises import ps08
    from devicelab.feedback import Outcome, evaluate

    name = mistake[0].replace("-", "_")
    feedback = evaluate(ps08._exercises.exercises[name], _namespace([MISTAKES[mistake]]))
    assert feedback.outcome is Outcome.INCORRECT and words in feedback.message, str(feedback)


def test_hints_come_in_levels_and_no_solutions_ship():
    from devicelab.exercises import ps08

    assert all(len(e.hints) >= 3 for e in ps08._exercises.exercises.values())
    assert all(e.solution is None for e in ps08._exercises.exercises.values())


def _hangs(rank, world_size, data, epochs):
    import torch
    import torch.distributed as dist

    if rank == 0:
        dist.recv(torch.zeros(1), src=1)     # rank 1 never sends
    else:
        time.sleep(600)


def test_a_hanging_job_fails_within_its_time_limit_and_leaves_no_rank_behind():
    from devicelab.exercises.ps08 import RanksFailed, run_ranks

    before = set(multiprocessing.active_children())
    start = time.monotonic()
    with pytest.raises(RanksFailed, match="did not finish within 3 s"):
        run_ranks(_hangs, timeout_s=3)
    assert time.monotonic() - start < 15
    assert not [p for p in multiprocessing.active_children() if p not in before and p.is_alive()]


def test_the_given_script_stops_at_its_first_collective_on_the_cpu():
    """gloo checks the sizes of what it receives: rank 0's lone all-reduce meets rank 1's gradients."""
    from devicelab.exercises.ps08 import RanksFailed, run_ranks, train

    with pytest.raises(RanksFailed, match="collective mismatch"):
        run_ranks(train)


def test_a_healthy_job_is_far_inside_the_time_limit():
    """TIME_LIMIT_S is about 60 times a healthy run on a 2-core machine: no correct answer fails for time."""
    from devicelab.exercises import ps08

    namespace = _namespace([c.source for c in support.code_cells(NOTEBOOK) if grade_id(c) == "fixed-train"])
    run = ps08.run_ranks(namespace["fixed_train"], world_size=3, epochs=3, samples=36)
    assert run.seconds < ps08.TIME_LIMIT_S / 5, run.seconds


def test_workers_off_device_raises_the_fork_error_only_in_workers_and_restores_torch():
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from devicelab.exercises.ps08 import FORK_ERROR, Samples, read_all, workers_off_device

    lazy_init = torch.cuda._lazy_init
    with workers_off_device() as trap:
        assert torch.ones(2).to("meta").device.type == "meta"       # the main process may use the device
        with pytest.raises(RuntimeError, match="Cannot re-initialize CUDA in forked subprocess"):
            read_all(DataLoader(Samples(torch.zeros(4, 2), torch.zeros(4), "meta"), num_workers=1))
        xs, _ = read_all(DataLoader(TensorDataset(torch.zeros(4, 2), torch.zeros(4)), batch_size=2,
                                    num_workers=2))
        assert trap.workers_used() == 2 and len(xs) == 2
    assert torch.cuda._lazy_init is lazy_init and "spawn" in FORK_ERROR
    assert torch.overrides._get_current_function_mode_stack() == []


def test_ddp_checkpoint_names_keys_as_ddp_does_and_labels_storages_cuda_1(tmp_path):
    import torch

    from devicelab.exercises.ps08 import build, ddp_checkpoint

    if torch.cuda.device_count() >= 2:
        pytest.skip("a machine with two GPUs loads it as saved")
    path, _ = ddp_checkpoint(tmp_path, kind="tagger")
    seen = []
    state = torch.load(path, weights_only=True,
                       map_location=lambda storage, location: seen.append(location) or storage)["model"]
    assert set(seen) == {"cuda:1"}
    assert sorted(state) == sorted(f"module.{k}" for k in build("tagger", 0).state_dict())
    assert "module.block.module.weight" in state and "module.bn.running_mean" in state


def test_weight_differences_and_off_device_say_what_is_wrong_with_the_model():
    import torch
    from torch import nn

    from devicelab.exercises.ps08 import build, off_device, weight_differences

    trained, other = build("mlp", seed=0), build("mlp", seed=1)
    assert weight_differences(build("mlp", seed=0), trained) == []
    assert weight_differences(other, trained) == [
        ("none of the model's 4 parameters and buffers holds the checkpoint's values: the model was not "
         "loaded from it")]
    partly = build("mlp", seed=1)
    partly.load_state_dict(trained.state_dict())
    with torch.no_grad():
        partly[0].bias.add_(1)
    assert weight_differences(partly, trained) == ["0.bias does not hold the checkpoint's values"]
    longer = nn.Sequential(*build("mlp", seed=0), nn.Linear(2, 2))
    assert weight_differences(longer, trained) == [
        f"the model holds {name}, which the checkpoint's model does not" for name in ("3.bias", "3.weight")]
    assert weight_differences(nn.Sequential(*list(build("mlp", seed=0))[:1]), trained)[0] == (
        "the model has no 2.bias, which the checkpoint's model holds")
    emptied = nn.Sequential()
    assert weight_differences(emptied, trained) == [
        "the model holds no parameters or buffers: nothing of the checkpoint is in it"]
    assert off_device(emptied, "meta") == ["the model holds no parameters or buffers"]
    assert off_device(trained, "cpu") == []
    assert off_device(trained, "meta")[0] == "0.weight is on cpu, not on meta"
