"""Lesson 03, moving tensors: what section 6 says about pickle is what pickle does."""

import pickle

import nbformat
import torch

from autograder import COURSE_ROOT

LESSON = COURSE_ROOT / "notebooks" / "03-moving-tensors.ipynb"


def _cell(cell_id: str) -> str:
    return next(c.source for c in nbformat.read(LESSON, as_version=4).cells if c.get("id") == cell_id)


def test_pickle_saves_a_real_storage_through_torch_save_and_a_meta_tensor_without_one():
    """A meta tensor (its storage holds no data) is rebuilt by _rebuild_meta_tensor_no_storage (defined in
    torch/_utils.py, picked in torch/_tensor.py) from its dtype, shape and strides; a tensor with data by
    _rebuild_tensor_v2, its storage pickled by torch.save (Storage.__reduce__, torch/storage.py), which is the
    path a CUDA tensor takes too."""
    cpu, meta = torch.ones(1000), torch.ones(1000, device="meta")
    assert cpu.__reduce_ex__(2)[0].__name__ == "_rebuild_tensor_v2"
    assert cpu.untyped_storage().__reduce__()[0].__name__ == "_load_from_bytes"
    assert meta.__reduce_ex__(2)[0].__name__ == "_rebuild_meta_tensor_no_storage"
    assert len(pickle.dumps(cpu)) > 4000 > len(pickle.dumps(meta))
    assert torch.equal(pickle.loads(pickle.dumps(cpu)), cpu)


def test_section_6_shows_pickle_on_a_cpu_tensor_and_says_what_meta_does():
    code = _cell("pickle-storage")
    assert "torch.ones(1000)," in code and "pickle.dumps(t)" in code
    assert "_rebuild_meta_tensor_no_storage" in _cell("pickle-storage-after")
    assert "pickle" not in _cell("c1360aef")
