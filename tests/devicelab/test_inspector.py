"""The device inspector: tensor_table lists tensors from namespaces, modules and containers."""

import subprocess
import sys
from collections import namedtuple
from pathlib import Path
from unittest import mock

import torch
from torch import nn

from devicelab.inspector import TensorRow, TensorTable, tensor_table

# not autograder's: these tests run where only devicelab is
COURSE_ROOT = Path(__file__).resolve().parents[2]


def names(table: TensorTable) -> list[str]:
    return [row.name for row in table]


def test_a_single_cpu_tensor_gives_one_row_with_its_facts():
    table = tensor_table(torch.ones(2, 3, dtype=torch.float64))
    [row] = table.rows
    assert row == TensorRow("tensor", "tensor", (2, 3), torch.float64, torch.device("cpu"), False, 48)


def test_a_meta_tensor_is_listed_without_asking_whether_it_is_pinned():
    [row] = tensor_table(torch.ones(4, device="meta")).rows
    assert row.device == torch.device("meta")
    assert row.pinned is None
    assert row.nbytes == 16
    assert "n/a" in str(tensor_table(torch.ones(4, device="meta")))


def test_a_zero_dim_tensor_has_an_empty_shape():
    [row] = tensor_table(torch.tensor(3.0)).rows
    assert row.shape == ()
    assert row.nbytes == 4


def test_a_module_lists_parameters_and_buffers_by_qualified_name():
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    table = tensor_table(model)
    kinds = {row.name: row.kind for row in table}
    assert kinds == {
        "0.weight": "parameter", "0.bias": "parameter", "1.weight": "parameter", "1.bias": "parameter",
        "1.running_mean": "buffer", "1.running_var": "buffer", "1.num_batches_tracked": "buffer",
    }
    assert {row.dtype for row in table if row.name == "1.num_batches_tracked"} == {torch.int64}


def test_a_module_moved_to_meta_shows_meta_everywhere():
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)).to("meta")
    assert {row.device.type for row in tensor_table(model)} == {"meta"}


class WithPlainTensor(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 2)
        self.scale = torch.ones(2)  # not registered: Module.to() leaves it behind


def test_a_plain_tensor_attribute_shows_up_and_stays_behind_after_module_to():
    model = WithPlainTensor().to("meta")
    rows = {row.name: row for row in tensor_table(model)}
    assert rows["scale"].kind == "attribute"
    assert rows["scale"].device == torch.device("cpu")
    assert rows["linear.weight"].device == torch.device("meta")
    assert "register_buffer" in str(tensor_table(model))


def test_a_module_without_tensors_gives_an_empty_table():
    table = tensor_table(nn.ReLU())
    assert len(table) == 0
    assert str(table) == "No tensors found."
    assert table.totals() == {}


def test_nested_containers_are_walked_and_named_by_path():
    batch = {"x": torch.ones(2), "extra": [torch.zeros(1), (torch.zeros(3), "label", 7)], "n": 5}
    assert names(tensor_table(batch)) == ["x", "extra[0]", "extra[1][0]"]
    assert names(tensor_table([torch.ones(1), {"k": torch.ones(1)}])) == ["[0]", "[1]['k']"]


def test_a_namedtuple_is_named_by_field():
    Pair = namedtuple("Pair", "inputs targets")
    assert names(tensor_table(Pair(torch.ones(2), torch.zeros(2)))) == ["inputs", "targets"]


def test_a_namespace_skips_private_names_history_and_non_tensors():
    model = nn.Linear(2, 1)
    namespace = {
        "__name__": "__main__", "__builtins__": {}, "_": torch.ones(1), "_hidden": torch.ones(1),
        "In": ["", "x = 1"], "Out": {3: torch.ones(1)},
        "x": torch.ones(2), "count": 3, "text": "hello", "model": model, "torch": torch,
    }
    assert names(tensor_table(namespace)) == ["x", "model.weight", "model.bias"]


def test_the_real_globals_of_this_module_work():
    table = tensor_table(globals())
    assert all(not row.name.startswith("_") for row in table)


def test_an_empty_namespace_and_non_tensors_give_empty_tables():
    for obj in ({}, {"__name__": "__main__"}, [], (), None, 42, "a string", object()):
        table = tensor_table(obj)
        assert len(table) == 0, f"{obj!r} should give no rows"
        assert table.summary() == "No tensors found."
        assert "No tensors found." in table._repr_html_()


def test_a_container_that_holds_itself_does_not_recurse_forever():
    loop: list = [torch.ones(1)]
    loop.append(loop)
    assert names(tensor_table(loop)) == ["[0]"]


def test_the_same_tensor_under_two_names_is_listed_twice():
    t = torch.ones(2)
    table = tensor_table({"a": t, "b": t})
    assert names(table) == ["a", "b"]
    assert table.totals()[torch.device("cpu")].nbytes == 16


def test_summary_counts_tensors_and_bytes_per_device():
    table = tensor_table({"big": torch.ones(3 * 2**17), "w": torch.ones(2, device="meta"),
                          "b": torch.ones(3)})
    totals = table.totals()
    assert list(totals) == [torch.device("cpu"), torch.device("meta")]
    assert (totals[torch.device("cpu")].count, totals[torch.device("cpu")].nbytes) == (2, 1_572_876)
    assert (totals[torch.device("meta")].count, totals[torch.device("meta")].nbytes) == (1, 8)
    assert table.summary() == "cpu: 2 tensors, 1.5 MiB; meta: 1 tensor, 8 B, no data stored"


def test_text_columns_line_up():
    table = tensor_table({"a_long_name": torch.ones(1000, 3), "b": torch.ones(1, device="meta")})
    header, *rows, summary = str(table).splitlines()
    assert header.split() == ["name", "kind", "shape", "dtype", "device", "pinned", "size"]
    column = header.index("device")
    assert [row[column:].split()[0] for row in rows] == ["cpu", "meta"]
    assert summary == table.summary()


def test_html_escapes_names():
    html = tensor_table({"<b>x</b>": torch.ones(1)})._repr_html_()
    assert "&lt;b&gt;x&lt;/b&gt;" in html
    assert "<b>x</b>" not in html
    assert html.count("<tr>") == 2  # header and one row


def test_rows_come_back_as_plain_dicts():
    [row] = tensor_table({"x": torch.ones(2, 2)}).as_dicts()
    assert row == {"name": "x", "kind": "tensor", "shape": (2, 2), "dtype": torch.float32,
                   "device": torch.device("cpu"), "pinned": False, "nbytes": 16}


def test_a_parameter_outside_a_module_is_a_parameter():
    [row] = tensor_table({"p": nn.Parameter(torch.ones(2))}).rows
    assert row.kind == "parameter"


def test_is_pinned_failing_shows_not_applicable_instead_of_crashing():
    with mock.patch.object(torch.Tensor, "is_pinned", side_effect=RuntimeError("Found no NVIDIA driver")):
        [row] = tensor_table(torch.ones(2)).rows
    assert row.pinned is None


def test_sparse_tensors_have_no_byte_size_but_still_print():
    table = tensor_table({"s": torch.ones(2, 2).to_sparse(), "d": torch.ones(2)})
    assert [row.nbytes for row in table] == [None, 8]
    assert "1 of unknown size" in table.summary()
    assert "n/a" in str(table)


def test_building_a_table_does_not_initialise_cuda():
    """Reading where tensors live must not start CUDA (a process that forks afterwards would break)."""
    with mock.patch("torch.cuda._lazy_init", side_effect=AssertionError("tensor_table initialised CUDA")):
        tensor_table({"x": torch.ones(2), "m": nn.Linear(2, 2), "meta": torch.ones(1, device="meta")})
    # On a GPU machine, also in a fresh process, where no other test has initialised CUDA first.
    code = ("import torch; from torch import nn; from devicelab.inspector import tensor_table; "
            "tensor_table({'x': torch.ones(2), 'm': nn.Linear(2, 2)}); print(torch.cuda.is_initialized())")
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           cwd=COURSE_ROOT)
    assert fresh.stdout.strip() == "False"


def test_sizes_use_the_course_binary_units():
    table = tensor_table({"x": torch.ones(256, 1024, dtype=torch.uint8),
                          "y": torch.ones(1000, dtype=torch.uint8)})
    assert [row.cells()[-1] for row in table.rows] == ["256 KiB", "1000 B"]
    assert table.summary() == "cpu: 2 tensors, 257.0 KiB"
