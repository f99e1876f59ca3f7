"""Checks and hints for ps03-device-mismatch."""

import re

import torch
from torch import nn

from devicelab.fakes import on_device
from devicelab.feedback import Exercise, checker


def call_keeping_the_model(forward_on_model_device, model, x):
    """Return forward_on_model_device(model, x), turning 'the model was copied off meta' into a clear failure.

    The graded test cells use it."""
    try:
        return forward_on_model_device(model, x)
    except NotImplementedError as exc:
        if "meta" not in str(exc):
            raise
        raise AssertionError(
            f"forward_on_model_device tried to copy the model's meta tensors to the cpu ({exc}): move x to "
            "the model's device, never the model"
        ) from exc
    except RuntimeError as exc:
        if "device" not in str(exc):
            raise
        raise AssertionError(
            f"calling the model raised {exc!r}: move x to the device of the model's first parameter"
        ) from exc


def expect_conflict(check_same_device, *tensors, names=()) -> None:
    """Check that check_same_device(*tensors) raises RuntimeError naming every device in `names`.

    The graded test cells use it."""
    where = ", ".join(f"{'0-dim ' if t.dim() == 0 else ''}{t.device}" for t in tensors)
    try:
        got = check_same_device(*tensors)
    except NotImplementedError:
        raise
    except RuntimeError as exc:
        message = str(exc)
    except Exception as exc:
        raise AssertionError(
            f"check_same_device({where}) raised {type(exc).__name__}: {exc}; raise RuntimeError instead"
        ) from exc
    else:
        raise AssertionError(
            f"check_same_device({where}) returned {got!r}, but these tensors cannot be combined: raise "
            "RuntimeError"
        )
    for name in names:
        device = torch.device(name)
        # "cuda:1" must be named itself: "cuda:10" does not name it
        named = re.search(re.escape(str(device)) + r"(?!\d)", message) is not None
        assert named or repr(device) in message, (
            f"the RuntimeError for tensors on {where} should name the device {str(device)!r}; "
            f"its message was {message!r}"
        )


def _forward_on_model_device(forward_on_model_device) -> None:
    model = nn.Linear(3, 2).to("meta")
    out = forward_on_model_device(model, torch.ones(4, 3))
    assert out.device.type == "meta", "the output should come from the model's device: move x, not the model."
    assert next(model.parameters()).device.type == "meta", "the model moved: leave it where it is and move x."
    double = nn.Linear(3, 2).double()
    out = forward_on_model_device(double, torch.ones(4, 3))
    assert out.dtype == torch.float64, (
        "match the dtype of the model's first parameter too: x.to(device, dtype).")
    ids = forward_on_model_device(nn.Embedding(5, 2).double(), torch.tensor([1, 3]))
    assert ids.shape == (2, 2), (
        "token ids keep their integer dtype: convert x only when x.is_floating_point().")
    x = torch.ones(2)
    assert torch.equal(forward_on_model_device(nn.ReLU(), x), x), (
        "a model without parameters gets x as it is.")


def _off_device(off_device) -> None:
    net = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    net[1].to("meta")
    got = off_device(net, "cpu")
    expected = ["1.bias", "1.num_batches_tracked", "1.running_mean", "1.running_var", "1.weight"]
    assert list(got) == expected, (
        f"off_device(net, 'cpu') should be {expected} (buffers too, sorted), not {got!r}.")
    assert off_device(net, "meta") == ["0.bias", "0.weight"], (
        "names come from named_parameters()/named_buffers().")
    gpu = nn.Linear(2, 2)
    # a buffer that reports cuda:1 (no GPU needed)
    gpu.register_buffer("table", on_device(torch.ones(3), "cuda:1"))
    for device, expected in [("cuda", ["bias", "weight"]), ("cuda:1", ["bias", "weight"]),
                             ("cuda:0", ["bias", "table", "weight"])]:
        got = off_device(gpu, device)
        assert got == expected, (
            f"With a buffer on cuda:1, off_device(model, {device!r}) should be {expected}, not {got!r}: "
            "asking about plain cuda (no index) asks about the type only, any GPU will do; with an index, "
            "only that GPU.")


def _check_same_device(check_same_device) -> None:
    meta = torch.ones(2, device="meta")
    assert check_same_device(torch.ones(2), torch.zeros(3)) == torch.device("cpu"), (
        "two CPU tensors share cpu.")
    assert check_same_device(torch.tensor(2.0), meta) == torch.device("meta"), (
        "a 0-dim CPU tensor fits with any device: the answer here is meta.")
    try:
        check_same_device(torch.ones(1), meta)
    except RuntimeError as error:
        assert "cpu" in str(error) and "meta" in str(error), "the message should name both devices."
    else:
        raise AssertionError("torch.ones(1) (1-dim, not a scalar) and a meta tensor conflict: raise "
                             "RuntimeError.")
    try:
        check_same_device()
    except ValueError:
        pass
    else:
        raise AssertionError("with no tensors at all, raise ValueError.")


_exercises = checker(
    Exercise("forward_on_model_device", _forward_on_model_device, hints=(
        "Ask the model: next(model.parameters(), None) is its first parameter, or None.",
        "Move the input, with both device and dtype in one call: x.to(p.device, p.dtype).",
        ("Only a floating-point x takes the parameter's dtype (x.is_floating_point()); token ids stay "
         "integers."),
        "Call model(x) as it is: no no_grad(), no eval(), no .detach(), so gradients flow as usual.",
    )),
    Exercise("off_device", _off_device, hints=(
        "module.named_parameters() and module.named_buffers() give qualified names like '1.running_mean'.",
        ("off_device asks where tensors are. A GPU tensor always reports an index (cuda:0), so asking about "
         "plain cuda can only mean the type: any GPU will do. With an index (cuda:1), only that very GPU."),
        "Compare with target = torch.device(device): its .index is None or a number. Then sort the names.",
    )),
    Exercise("check_same_device", _check_same_device, hints=(
        "Leave out the 0-dim CPU tensors (t.dim() == 0 and t.device.type == 'cpu'): they fit anywhere.",
        "Collect the remaining devices in a set: none left means cpu; more than one is a conflict.",
        "Raise RuntimeError naming every device in the conflict; ValueError when no tensor is given.",
    )),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution
