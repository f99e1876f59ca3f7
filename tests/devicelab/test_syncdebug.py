"""The sync-debug helper reports the operations that warned, and always switches the mode back."""

import warnings
from unittest import mock

import pytest

from devicelab.syncdebug import print_syncs, warned_syncs


def _sync() -> None:
    warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)


def test_only_the_operations_that_warned_are_reported_and_the_mode_is_restored(capsys):
    with mock.patch("torch.cuda.set_sync_debug_mode") as mode:
        print_syncs({"x * 2": lambda: None, "x.item()": _sync,
                     "other warning": lambda: warnings.warn("unrelated", stacklevel=1)})
    assert [c.args[0] for c in mode.call_args_list] == ["warn", "default"]
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["x * 2           no warning", "x.item()        warned: synchronizing",
                     "other warning   no warning"]


def test_an_error_still_switches_the_mode_back():
    def boom() -> None:
        raise ValueError("boom")

    with mock.patch("torch.cuda.set_sync_debug_mode") as mode, pytest.raises(ValueError):
        warned_syncs({"boom": boom})
    assert mode.call_args_list[-1].args == ("default",)
