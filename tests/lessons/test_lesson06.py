"""Lesson 06, section 6: the photos its DataLoader workers load, the model its measurement is drawn against,
and what its text says about workers, as PyTorch's source (torch/utils/data/) does it."""

import inspect
import multiprocessing
import os
import sys
import time
import warnings

import nbformat
import pytest
import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data._utils.pin_memory import _pin_memory_loop

from autograder import COURSE_ROOT
from devicelab.exercises import lesson06
from devicelab.exercises.lesson06 import PackedPhotos, batches_per_second

LESSON = COURSE_ROOT / "notebooks" / "06-pinned-memory-and-dataloader.ipynb"


def _cell(cell_id: str) -> str:
    return next(c.source for c in nbformat.read(LESSON, as_version=4).cells if c.get("id") == cell_id)


def _wait_for(condition, seconds: float, what: str) -> None:
    """Return once condition() holds; fail after `seconds` (a ceiling against a hang, not a timing)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(what)
        time.sleep(0.01)


class Pids(Dataset):
    """Each sample is the id of the process that made it."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> int:
        return os.getpid()


def _epoch_pids(loader) -> set[int]:
    return {int(pid) for batch in loader for pid in batch}


# ---- PackedPhotos: real decoding, a random crop and flip, counted per process ---------------------------

def test_photos_are_stored_compressed_and_decode_to_whole_images():
    photos = PackedPhotos(n=20, size=64, crop=32, files=4)
    assert len(photos) == 20 and len(photos.files) == 4
    assert all(len(f) < 3 * 64 * 64 for f in photos.files), "stored compressed, as PNG files are"
    whole = photos.decode(5)
    assert whole.shape == (3, 64, 64) and whole.dtype == torch.uint8
    assert torch.equal(whole, photos.decode(1)), "photo 5 is file 1 again (5 % 4)"
    assert not torch.equal(photos.decode(0), photos.decode(1)), "the files differ"


def test_a_sample_is_a_crop_of_its_photo_flipped_or_not_with_a_label():
    photos = PackedPhotos(n=30, size=16, crop=8, files=3)
    torch.manual_seed(0)
    flips = 0
    for i in range(30):
        image, label = photos[i]
        assert image.shape == (3, 8, 8) and image.is_contiguous() and label == i % 10
        whole = photos.decode(i)
        windows = [whole[:, t:t + 8, s:s + 8] for t in range(9) for s in range(9)]
        plain = any(torch.equal(image, w) for w in windows)
        flipped = any(torch.equal(image, w.flip(-1)) for w in windows)
        assert plain or flipped, f"sample {i} is no crop of its photo"
        flips += flipped and not plain
    assert 0 < flips < 30, "some samples are flipped, not all"


def test_photos_refuse_a_crop_larger_than_the_photo():
    with pytest.raises(ValueError, match="crop"):
        PackedPhotos(size=16, crop=32)


def test_the_count_says_which_process_made_each_sample():
    photos = PackedPhotos(n=8 * 4, size=16, crop=8)
    for _ in DataLoader(photos, batch_size=4):
        pass
    assert photos.made[0] == 32 and photos.made[1:].sum() == 0, "num_workers=0: the loop's own process"
    photos.made.zero_()
    for _ in DataLoader(photos, batch_size=4, num_workers=2):
        pass
    assert photos.made[0] == 0, "with workers the loop's process makes no sample"
    assert photos.made[1:3].tolist() == [16, 16], "batches go to the workers in rotation: 4 batches each"


# ---- the model the measurement is drawn against, and the prediction's answer ----------------------------

def test_the_model_grows_with_the_workers_only_while_each_has_a_core():
    batch_s = 0.035
    assert batches_per_second(0, cores=2, batch_s=batch_s) == batches_per_second(1, cores=2, batch_s=batch_s)
    assert batches_per_second(2, 2, batch_s) == pytest.approx(2 / batch_s)
    assert batches_per_second(4, 16, batch_s) == pytest.approx(4 / batch_s)
    assert batches_per_second(8, 2, batch_s) == batches_per_second(2, 2, batch_s)
    with pytest.raises(ValueError):
        batches_per_second(2, 0, batch_s)


def test_the_eight_workers_answer_is_what_the_model_says_on_two_cores():
    prediction = lesson06.PREDICTIONS["eight-workers"]
    two, eight = (batches_per_second(w, cores=2, batch_s=0.035) for w in (2, 8))
    assert eight == two and prediction.answer == "about as many"
    assert "2 cores" in prediction.question and "num_workers=8" in prediction.question


def test_the_lesson_measures_beyond_two_cores_with_workers_started_before_the_clock():
    run = _cell("workers-run")
    assert "(1, 2, 4, 8)" in run and "persistent_workers=True" in run
    assert run.index("for _ in loader:") < run.index("start = time.perf_counter()"), "the first epoch untimed"
    assert "ask(\"eight-workers\")" in _cell("ask-eight-workers")


def test_pytorch_warns_about_more_workers_than_the_cores_as_the_answer_says():
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        DataLoader(Pids(), num_workers=cores + 1)
    assert any("suggested max number of worker" in str(w.message) for w in caught)
    assert "check_worker_number_rationality" in _cell("workers-answer")


# ---- what the section says of PyTorch's source ----------------------------------------------------------

def test_workers_run_getitem_in_processes_of_their_own():
    pids = _epoch_pids(DataLoader(Pids(), batch_size=2, num_workers=2))
    assert len(pids) == 2 and os.getpid() not in pids
    assert _epoch_pids(DataLoader(Pids(), batch_size=2)) == {os.getpid()}


def test_workers_start_at_every_epoch_unless_they_persist():
    fresh = DataLoader(Pids(), batch_size=2, num_workers=2)
    first, second = _epoch_pids(fresh), _epoch_pids(fresh)
    assert first.isdisjoint(second), "without persistent_workers, each epoch starts new processes"
    kept = DataLoader(Pids(), batch_size=2, num_workers=2, persistent_workers=True)
    first = _epoch_pids(kept)
    assert os.getpid() not in first, "the first epoch starts workers either way"
    assert _epoch_pids(kept) == first, "persistent workers are the same processes next epoch"
    assert iter(kept) is iter(kept), "DataLoader.__iter__ keeps one iterator and resets it"


@pytest.mark.parametrize("prefetch", [2, 4])
def test_workers_run_ahead_by_prefetch_factor_batches_each(prefetch):
    photos = PackedPhotos(n=16 * 4, size=16, crop=8)
    batches = iter(DataLoader(photos, batch_size=4, num_workers=2, prefetch_factor=prefetch))
    next(batches)
    ahead = 2 * prefetch
    _wait_for(lambda: int(photos.made.sum()) >= 4 * (1 + ahead), 60,
              f"the workers made {int(photos.made.sum()) // 4} batches, not 1 + {ahead}")
    assert batches._send_idx == 1 + ahead, "indices handed out: the one taken, and prefetch_factor per worker"
    assert batches._tasks_outstanding <= ahead
    assert int(photos.made.sum()) == 4 * (1 + ahead), "no worker made a batch it was not handed"
    del batches


def test_prefetch_factor_is_two_unless_set_as_the_lesson_says():
    assert DataLoader(Pids(), num_workers=1).prefetch_factor == 2
    assert DataLoader(Pids()).prefetch_factor is None
    assert "`prefetch_factor` is 2 unless you set it" in _cell("workers-prefetch")
    source = inspect.getsource(torch.utils.data.dataloader._MultiProcessingDataLoaderIter._reset)
    assert "for _ in range(self._prefetch_factor * self._num_workers):" in source


def test_the_pinning_thread_copies_in_one_thread_as_the_cell_prints():
    shown = inspect.getsource(_pin_memory_loop).splitlines()[:4]
    assert "torch.set_num_threads(1)" in "\n".join(shown)
    assert "splitlines()[:4]" in _cell("workers-pin-cost")
    assert "data = pin_memory(data, device)" in inspect.getsource(_pin_memory_loop)


def test_the_start_method_is_what_the_lesson_says_for_this_python():
    method = multiprocessing.get_context().get_start_method()
    if sys.platform == "linux":
        assert method == ("fork" if sys.version_info < (3, 14) else "forkserver")
    text = _cell("workers-start-answer")
    assert "Linux's default up to Python 3.13" in text and "Linux's from Python 3.14" in text
