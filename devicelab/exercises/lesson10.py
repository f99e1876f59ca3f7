"""Predictions, practice and helpers for lesson 10, several devices: all run on the CPU."""

from pathlib import Path

import torch

from devicelab.feedback import Exercise, checker
from devicelab.predict import Prediction, asker


def save_as_if_from(obj, path: Path, location: str) -> None:
    """Save `obj` with every storage labelled as saved from `location` ("cuda:1"), as that GPU writes it."""
    from torch import serialization

    original = serialization.location_tag
    serialization.location_tag = lambda storage: location
    try:
        torch.save(obj, path)
    finally:
        serialization.location_tag = original


def saved_locations(path: Path) -> list[str]:
    """Return the location label of each storage in a checkpoint, read without moving anything."""
    seen: list[str] = []

    def keep_on_cpu(storage, location):
        seen.append(location)
        return storage

    torch.load(path, map_location=keep_on_cpu)
    return seen


def _shard_of(shard_of) -> None:
    from torch.utils.data import DistributedSampler

    def expected(n: int, num_replicas: int, rank: int, epoch: int) -> list[int]:
        sampler = DistributedSampler(range(n), num_replicas=num_replicas, rank=rank, shuffle=True, seed=0)
        sampler.set_epoch(epoch)
        return list(sampler)

    got = shard_of(16, 2, 0, 0)
    assert isinstance(got, list), f"shard_of should return a list of ints, not a {type(got).__name__}."
    assert len(got) == 8, f"16 samples over 2 ranks give each rank 8 indices, not {len(got)}."
    assert got == expected(16, 2, 0, 0), (
        f"shard_of(16, 2, 0, 0) should be {expected(16, 2, 0, 0)}, not {got}: shuffle all 16 indices with "
        "torch.randperm and a generator seeded with seed + epoch, then take every num_replicas-th from rank.")
    got = shard_of(16, 2, 0, 1)
    assert got == expected(16, 2, 0, 1), (
        f"at epoch 1 the order should change to {expected(16, 2, 0, 1)}, not {got}: seed with seed + epoch.")
    got = shard_of(16, 2, 1, 1)
    assert got == expected(16, 2, 1, 1), (
        f"rank 1 should get {expected(16, 2, 1, 1)}, not {got}: start at index `rank`, step `num_replicas`.")
    got = shard_of(10, 3, 2, 0)
    assert got == expected(10, 3, 2, 0), (
        f"10 samples over 3 ranks: pad the shuffled list with its own first 2 indices to 12, so rank 2 "
        f"should get {expected(10, 3, 2, 0)}, not {got}.")


_exercises = checker(
    Exercise("shard_of", _shard_of, hints=(
        ("Shuffle first: `g = torch.Generator(); g.manual_seed(seed + epoch)`, then "
         "`torch.randperm(n, generator=g).tolist()` (the seed is 0 here)."),
        ("Pad to a multiple of the ranks: `total = math.ceil(n / num_replicas) * num_replicas`, then add the "
         "first `total - n` indices again at the end."),
        "Then slice: `indices[rank:total:num_replicas]`.",
    ), solution='''
def shard_of(n: int, num_replicas: int, rank: int, epoch: int) -> list:
    """Return the indices DistributedSampler(shuffle=True, seed=0) gives `rank` at `epoch`, for n samples."""
    import math
    g = torch.Generator()
    g.manual_seed(0 + epoch)
    indices = torch.randperm(n, generator=g).tolist()
    total = math.ceil(n / num_replicas) * num_replicas
    indices += indices[: total - n]
    return indices[rank:total:num_replicas]
''', success="That is DistributedSampler's shard: each rank a different part, a new order every epoch."),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution

PREDICTIONS = {
    "ddp-wrap": Prediction(
        question=("Two processes each build the same model with a different random seed, so their weights "
                  "differ. Each then wraps its model with `DistributedDataParallel(model)`. Right after the "
                  "wrap, before any training, how do the two processes' weights compare?"),
        choices=("they still differ: each keeps the weights it built",
                 "they are equal: both now hold rank 0's weights",
                 "they are equal: both now hold the average of the two"),
        answer="they are equal: both now hold rank 0's weights",
        giveaways=("rank 0's weights", "broadcasts rank 0", "from rank 0", "_sync_module_states",
                   "start off at the same value"),
        reason=("Building a DDP module sends rank 0's parameters and buffers to every other rank "
                "(`_sync_module_states` in `torch/nn/parallel/distributed.py`): all replicas start equal.")),
    "ddp-step": Prediction(
        question=("Whatever the wrap did to the weights, say both ranks start a step from the same ones. "
                  "Each takes one optimizer step (the same SGD, the same learning rate) on a different batch "
                  "of its own. How do the weights compare afterwards?"),
        choices=("exactly equal, bit for bit",
                 "close, but not bit for bit: each rank rounded its own step",
                 "different: each rank moved towards its own batch"),
        answer="exactly equal, bit for bit",
        giveaways=("all-reduce", "allreduce", "gradients are averaged", "average of the ranks",
                   "mean of the own", "gradients are summed"),
        reason=("During `backward()` DDP all-reduces the gradients: every rank ends up with the same average "
                "of all ranks' gradients, so the same optimizer takes the same step everywhere.")),
    "set-epoch": Prediction(
        question=("A `DistributedSampler(data, num_replicas=2, rank=0, shuffle=True)` is iterated once per "
                  "epoch for three epochs, and nothing else is called on it. What order does rank 0 get?"),
        choices=("a new shuffle every epoch", "the same shuffled order every epoch",
                 "a new shuffle every epoch, but one that differs from rank to rank only by chance"),
        answer="the same shuffled order every epoch",
        giveaways=("same order every epoch", "seed + epoch", "seed plus the epoch", "same ordering",
                   "until set_epoch", "without set_epoch"),
        reason=("The sampler shuffles with a generator seeded with `seed + epoch`, and its epoch stays 0 "
                "until you call `sampler.set_epoch(epoch)`.")),
}

ask = asker(PREDICTIONS)
