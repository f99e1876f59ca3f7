"""Lesson 10, several devices: each prediction's answer, and each claim its text makes, is what runs."""

import multiprocessing

import nbformat
import pytest
import torch
from torch import nn
from torch.utils.data import DistributedSampler

from autograder import COURSE_ROOT
from devicelab import ddp
from devicelab.exercises.lesson10 import PREDICTIONS, save_as_if_from, saved_locations

LESSON = COURSE_ROOT / "notebooks" / "10-several-devices.ipynb"


def _cell(cell_id: str) -> str:
    return next(c.source for c in nbformat.read(LESSON, as_version=4).cells if c.get("id") == cell_id)


@pytest.fixture(scope="module")
def run() -> ddp.Run:
    """One real two-process DDP run on the CPU (gloo), shared by the tests that read it."""
    return ddp.train_ranks(world_size=2, steps=3, timeout_s=120)


# ----------------------------------------------------------------------------------------------------------
# Section 2: the DDP run


def test_each_rank_is_its_own_process_in_a_gloo_group(run):
    assert [r["rank"] for r in run.ranks] == [0, 1]
    assert [r["local_rank"] for r in run.ranks] == [0, 1]
    assert len({r["pid"] for r in run.ranks}) == 2, "two ranks, two processes"
    assert {r["backend"] for r in run.ranks} == {"gloo"} and {r["world_size"] for r in run.ranks} == {2}


def test_ranks_build_different_weights_and_ddp_gives_them_rank_0s(run):
    """ask('ddp-wrap'): the wrap copies rank 0's parameters to the other rank."""
    assert not run.same_across_ranks("built") and run.max_difference("built") > 0.01
    assert run.same_across_ranks("wrapped")
    assert run.ranks[1]["wrapped"] == run.ranks[0]["built"], "the common weights are rank 0's own"
    assert PREDICTIONS["ddp-wrap"].answer == "they are equal: both now hold rank 0's weights"


def test_after_every_step_the_ranks_weights_are_equal_bit_for_bit(run):
    """ask('ddp-step'), and section 2's gradients: own gradients differ, DDP's are their mean."""
    for step in range(3):
        assert run.same_across_ranks("after_steps", step)
        assert not run.same_across_ranks("local_grads", step), "each rank's own batch gives its own gradient"
        assert run.same_across_ranks("ddp_grads", step)
        assert run.mean_of_local_grads_matches(step)
    assert run.ranks[0]["after_steps"][0] != run.ranks[0]["wrapped"], "the step changed the weights"
    assert PREDICTIONS["ddp-step"].answer == "exactly equal, bit for bit"


def test_the_ranks_shards_of_the_run_are_disjoint_and_cover_the_data(run):
    shards = [r["shard"] for r in run.ranks]
    assert not set(shards[0]) & set(shards[1])
    assert sorted(shards[0] + shards[1]) == list(range(len(ddp.dataset())))


def test_a_rank_that_fails_is_reported_instead_of_waited_for():
    """Each rank has 4 batches: asking for 5 steps makes every rank fail, and train_ranks says so."""
    with pytest.raises(RuntimeError, match="a DDP rank failed: StopIteration"):
        ddp.train_ranks(world_size=2, steps=5, timeout_s=120)


# ----------------------------------------------------------------------------------------------------------
# Section 3: DistributedSampler and set_epoch


def test_without_set_epoch_every_epoch_has_the_same_order():
    """ask('set-epoch')."""
    data = ddp.dataset(16)
    sampler = DistributedSampler(data, num_replicas=2, rank=0, shuffle=True)
    orders = [list(sampler) for _ in range(3)]
    assert orders[0] == orders[1] == orders[2]
    assert orders[0] != list(range(0, 16, 2)), "it is shuffled, not in order"
    assert PREDICTIONS["set-epoch"].answer == "the same shuffled order every epoch"
    stepped = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        stepped.append(list(sampler))
    assert stepped[0] == orders[0] and stepped[1] != stepped[0] and stepped[2] != stepped[1]


def test_the_sampler_pads_so_every_rank_gets_as_many_indices():
    shards = [list(DistributedSampler(range(10), num_replicas=3, rank=r)) for r in range(3)]
    assert [len(s) for s in shards] == [4, 4, 4]
    flat = shards[0] + shards[1] + shards[2]
    assert len(flat) == 12 and set(flat) == set(range(10)), "two indices appear twice"


def test_the_practice_solution_is_correct_and_the_notebook_stub_not_attempted():
    from devicelab.exercises.lesson10 import _exercises
    from devicelab.feedback import Outcome, evaluate

    exercise = _exercises.exercises["shard_of"]
    namespace = {"torch": torch}
    exec(exercise.solution, namespace)
    assert evaluate(exercise, namespace).outcome is Outcome.CORRECT
    stub = {"torch": torch}
    exec(_cell("practice-shard-of"), stub)
    assert evaluate(exercise, stub).outcome is Outcome.NOT_ATTEMPTED
    assert 'check("shard_of")' in _cell("practice-shard-of-check")


SHARD_OF_WRONG = {
    "ignores-the-epoch": ("def shard_of(n, num_replicas, rank, epoch):\n"
                          "    g = torch.Generator(); g.manual_seed(0)\n"
                          "    return torch.randperm(n, generator=g).tolist()[rank::num_replicas]"),
    "no-padding": ("def shard_of(n, num_replicas, rank, epoch):\n"
                   "    g = torch.Generator(); g.manual_seed(epoch)\n"
                   "    return torch.randperm(n, generator=g).tolist()[rank::num_replicas]"),
    "contiguous-blocks": ("def shard_of(n, num_replicas, rank, epoch):\n"
                          "    g = torch.Generator(); g.manual_seed(epoch)\n"
                          "    i = torch.randperm(n, generator=g).tolist(); k = n // num_replicas\n"
                          "    return i[rank * k:(rank + 1) * k]"),
}


@pytest.mark.parametrize("name", sorted(SHARD_OF_WRONG))
def test_realistic_wrong_answers_to_the_practice_are_incorrect_with_what_to_fix(name):
    from devicelab.exercises.lesson10 import _exercises
    from devicelab.feedback import Outcome, evaluate

    namespace = {"torch": torch}
    exec(SHARD_OF_WRONG[name], namespace)
    feedback = evaluate(_exercises.exercises["shard_of"], namespace)
    assert feedback.outcome is Outcome.INCORRECT and "should" in feedback.message, str(feedback)


# ----------------------------------------------------------------------------------------------------------
# Section 4: checkpoints labelled with another GPU


def test_a_checkpoint_labelled_cuda1_says_so_and_maps_where_asked(tmp_path):
    path = tmp_path / "ckpt.pt"
    save_as_if_from({"w": nn.Linear(2, 2).state_dict()}, path, "cuda:1")
    assert set(saved_locations(path)) == {"cuda:1"}
    loaded = torch.load(path, map_location={"cuda:1": "cpu"})
    assert loaded["w"]["weight"].device == torch.device("cpu")
    assert torch.load(path, map_location="meta")["w"]["weight"].device.type == "meta"
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError):
            torch.load(path)
    assert torch.serialization.location_tag(torch.ones(1).untyped_storage()) == "cpu", "the label is restored"


# ----------------------------------------------------------------------------------------------------------
# Sections 5 and 6: DataParallel without GPUs, start methods, shared tensors


def test_data_parallel_without_gpus_finds_no_devices_and_calls_the_module():
    if torch.cuda.is_available():
        pytest.skip("shown only where there is no GPU")
    dp = nn.DataParallel(ddp.small_model())
    assert dp.device_ids == [] and dp(torch.randn(3, 4)).shape == (3, 1)


def test_the_fork_message_the_lesson_quotes_is_pytorchs():
    import inspect

    import torch.cuda

    source = inspect.getsource(torch.cuda._lazy_init)
    quoted = _cell("fork-cuda")
    assert "Cannot re-initialize CUDA in forked subprocess. To use CUDA with " in source
    assert "Cannot re-initialize CUDA in forked subprocess" in quoted and "'spawn' start method" in quoted


def test_all_three_start_methods_exist_on_linux():
    assert set(multiprocessing.get_all_start_methods()) >= {"fork", "spawn", "forkserver"}


def test_a_tensor_sent_to_a_spawned_child_is_shared_not_copied():
    t = torch.zeros(3)
    child = multiprocessing.get_context("spawn").Process(target=ddp.add_one, args=(t,))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == 0
    assert t.tolist() == [1.0, 1.0, 1.0] and t.is_shared()


def test_touch_cuda_reports_instead_of_raising_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("shown only where there is no GPU")
    assert ddp.touch_cuda() != "ok"
