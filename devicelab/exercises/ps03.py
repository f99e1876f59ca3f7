"""Checks and hints for ps03-device-mismatch."""

import torch
from torch import nn

from devicelab.feedback import Exercise, checker


def _forward_on_model_device(forward_on_model_device) -> None:
    model = nn.Linear(3, 2).to("meta")
    out = forward_on_model_device(model, torch.ones(4, 3))
    assert out.device.type == "meta", "the output should come from the model's device: move x, not the model."
    assert next(model.parameters()).device.type == "meta", "the model moved: leave it where it is and move x."
    double = nn.Linear(3, 2).double()
    out = forward_on_model_device(double, torch.ones(4, 3))
    assert out.dtype == torch.float64, "match the dtype of the model's first parameter too: x.to(device, dtype)."
    ids = forward_on_model_device(nn.Embedding(5, 2).double(), torch.tensor([1, 3]))
    assert ids.shape == (2, 2), "token ids keep their integer dtype: convert x only when x.is_floating_point()."
    x = torch.ones(2)
    assert torch.equal(forward_on_model_device(nn.ReLU(), x), x), "a model without parameters gets x as it is."


def _off_device(off_device) -> None:
    net = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    net[1].to("meta")
    got = off_device(net, "cpu")
    expected = ["1.bias", "1.num_batches_tracked", "1.running_mean", "1.running_var", "1.weight"]
    assert list(got) == expected, f"off_device(net, 'cpu') should be {expected} (buffers too, sorted), not {got!r}."
    assert off_device(net, "meta") == ["0.bias", "0.weight"], "names come from named_parameters()/named_buffers()."


def _check_same_device(check_same_device) -> None:
    meta = torch.ones(2, device="meta")
    assert check_same_device(torch.ones(2), torch.zeros(3)) == torch.device("cpu"), "two CPU tensors share cpu."
    assert check_same_device(torch.tensor(2.0), meta) == torch.device("meta"), (
        "a 0-dim CPU tensor fits with any device: the answer here is meta.")
    try:
        check_same_device(torch.ones(1), meta)
    except RuntimeError as error:
        assert "cpu" in str(error) and "meta" in str(error), "the message should name both devices."
    else:
        raise AssertionError("torch.ones(1) (1-dim, not a scalar) and a meta tensor conflict: raise RuntimeError.")
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
        "Only a floating-point x takes the parameter's dtype (x.is_floating_point()); token ids stay integers.",
        "Call model(x) as it is: no no_grad(), no eval(), no .detach(), so gradients flow as usual.",
    )),
    Exercise("off_device", _off_device, hints=(
        "module.named_parameters() and module.named_buffers() give qualified names like '1.running_mean'.",
        ("target = torch.device(device): with an index (cuda:1) a tensor's device must equal it; without one "
         "(cuda, cpu) only the type must match. Then sort the names."),
    )),
    Exercise("check_same_device", _check_same_device, hints=(
        "Leave out the 0-dim CPU tensors (t.dim() == 0 and t.device.type == 'cpu'): they fit anywhere.",
        "Collect the remaining devices in a set: none left means cpu; more than one is a conflict.",
        "Raise RuntimeError naming every device in the conflict; ValueError when no tensor is given.",
    )),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution
