"""Lesson 05, async and timing: what its text and docs/facts.md say about copies agrees with PyTorch's
source and with each other."""

import nbformat

from autograder import COURSE_ROOT

LESSON = COURSE_ROOT / "notebooks" / "05-async-and-timing.ipynb"
FACTS = COURSE_ROOT / "docs" / "facts.md"
CHEATSHEET = COURSE_ROOT / "docs" / "cheatsheet.md"


def _cell(cell_id: str) -> str:
    return next(c.source for c in nbformat.read(LESSON, as_version=4).cells if c.get("id") == cell_id)


def test_a_blocking_download_copies_first_then_converts():
    """copy_kernel_cuda (Copy.cu): conversion_device is the CPU for a blocking copy, so an upload converts
    before the copy and a download after it."""
    assert "host to device before the copy, device to host after it" in _cell("non-blocking-table")
    assert "device to host, copied then converted" in CHEATSHEET.read_text()
    assert "a download after it" in FACTS.read_text()


def test_host_to_device_non_blocking_is_called_safe_only_for_the_gpu_s_work():
    text = _cell("e9352eac")
    assert "Host-to-device is safe:" not in text and "safe for the GPU's work" in text


def test_the_facts_say_of_jax_what_lesson_05_shows():
    """JAX orders later work after device_put by itself; block_until_ready is for the host's clock."""
    facts = FACTS.read_text()
    assert "`block_until_ready()` is right" not in facts and "needed only for the host's clock" in facts
    assert "later work\non `y` waits for the copy by itself" in next(
        c.source for c in nbformat.read(LESSON, as_version=4).cells if "### TensorFlow and JAX" in c.source)


def test_the_queue_and_pageable_read_predictions_answer_what_the_simulator_shows():
    """queue-3000: the host's clock after 3000 launches of 1 ms; stale-read: a non_blocking copy into a
    pageable buffer, read at once, gives the new values: the call returned only once they had landed."""
    from devicelab.exercises.lesson05 import PREDICTIONS
    from devicelab.simgpu import SimulatedGPU

    gpu = SimulatedGPU(initialized=True)
    for _ in range(3000):
        gpu.launch(0.001)
    assert PREDICTIONS["queue-3000"].answer == f"about {round(gpu.clock())} s"

    gpu = SimulatedGPU(initialized=True)
    host = gpu.host_buffer(4_000_000, pinned=False, data="batch 0")
    result = gpu.launch(0.020, nbytes=4_000_000, data="batch 1")
    gpu.to_cpu(result, non_blocking=True, out=host)
    assert host.read() == "batch 1" and gpu.clock() > 0.020
    assert PREDICTIONS["stale-read"].answer == "the new values"
    assert "20.8 ms" in _cell("pageable-read-answer") and f"{gpu.clock() * 1e3:.1f}" == "20.8"


def test_the_profile_shown_before_lesson_06_leaves_out_the_half_peak_fit():
    """Lesson 06 asks where a copy reaches half of its peak; the fixed cost's provenance names that size."""
    assert "fixed cost per copy" in _cell("7ebfaeaa") and "not in line" in _cell("7ebfaeaa")
