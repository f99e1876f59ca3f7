"""Practice and predictions for lesson 09, devices in real code: all run on the CPU (`meta` as a GPU)."""

import torch
from torch import nn

from devicelab.feedback import Exercise, checker
from devicelab.predict import Prediction, asker


def _adam_after_one_step(device: str = "cpu") -> torch.optim.Adam:
    """An Adam whose state was made by one step on the CPU, then loaded for a model on `device`."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    if device == "cpu":
        return optimizer
    with torch.device(device):
        moved = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    loaded = torch.optim.Adam(moved.parameters())
    loaded.load_state_dict(optimizer.state_dict())
    return loaded


def _state_devices(state_devices) -> None:
    fresh = torch.optim.Adam(nn.Linear(2, 2).parameters())
    got = state_devices(fresh)
    assert isinstance(got, set), f"state_devices should return a set of devices, not a {type(got).__name__}."
    assert got == set(), (f"before its first step Adam holds no state, so the answer should be an empty set, "
                          f"not {got!r}: read `optimizer.state`, not the parameters.")
    got = state_devices(_adam_after_one_step("cpu"))
    assert got == {torch.device("cpu")}, (
        f"after one step on the CPU the answer should be {{device('cpu')}}, not {got!r}.")
    behind = _adam_after_one_step("cpu")
    for group in behind.param_groups:  # parameters moved after the state was made: the state stays behind
        group["params"] = [nn.Parameter(p.detach().to("meta")) for p in group["params"]]
    got = state_devices(behind)
    assert got == {torch.device("cpu")}, (
        f"the state of these parameters (now on meta) was left on the CPU, so the answer should be "
        f"{{device('cpu')}}, not {got!r}: look at the state's tensors, not at the parameters.")
    got = state_devices(_adam_after_one_step("meta"))
    assert got == {torch.device("meta")}, (
        f"state loaded for parameters on meta should be reported on {{device('meta')}}, not {got!r}: leave "
        "out the `step` counters, which stay on the CPU.")


_exercises = checker(
    Exercise("state_devices", _state_devices, hints=(
        "`optimizer.state` maps each parameter to a dict of its state tensors, `step` among them.",
        ("Loop over `optimizer.state.values()`, then over each dict's items; keep `value.device` for every "
         "tensor whose key is not `\"step\"`."),
        "Return a set of `torch.device`: `{value.device for ...}` (an empty set before the first step).",
    ), solution='''
def state_devices(optimizer: torch.optim.Optimizer) -> set:
    """Return the devices of the optimizer's state tensors, its `step` counters left out."""
    return {value.device for state in optimizer.state.values() for key, value in state.items()
            if key != "step" and torch.is_tensor(value)}
''', success="Use it after resuming a run: the set should hold exactly the model's device."),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution

PREDICTIONS = {
    "adam-state": Prediction(
        question=("A model has 1.06 million float32 parameters (4.0 MiB). Right after "
                  "`optimizer = torch.optim.Adam(model.parameters())`, before any step, how many bytes do "
                  "the optimizer's state tensors hold?"),
        choices=("none yet: Adam makes its state at the first step",
                 "about 4 MiB: one running average per parameter",
                 "about 8 MiB: two running averages per parameter",
                 "about 12 MiB: two averages and a copy of the weights"),
        answer="none yet: Adam makes its state at the first step",
        giveaways=("empty until the first step", "made at the first step", "makes its state at",
                   "appear at the first step", "state is created lazily"),
        reason=("Adam makes its state lazily: `optimizer.state` stays empty until the first `step()`, which "
                "creates `exp_avg` and `exp_avg_sq` for each parameter (8 MiB here) and a 0-dim `step`. "
                "Memory measured right after building the optimizer misses it.")),
    "autocast-dtypes": Prediction(
        question=("Inside `with torch.autocast(device_type=\"cpu\", dtype=torch.bfloat16):`, a float32 "
                  "`nn.Linear` is applied to a float32 input. What are the dtypes of `linear.weight` and of "
                  "the output?"),
        choices=("both bfloat16", "weight float32, output bfloat16", "both float32"),
        answer="weight float32, output bfloat16",
        giveaways=("weights stay float32", "parameters stay float32", "casts the inputs",
                   "casts ops, not weights",
                   "copy of each weight", "changes no parameter", "chosen operations run"),
        reason=("Autocast leaves parameters alone: it casts an op's inputs as the op runs (the linear's "
                "matmul in bfloat16), so the output is bfloat16 and the weight stays float32.")),
    "optimizer-load-device": Prediction(
        question=("An Adam state saved from CPU tensors is loaded with `optimizer.load_state_dict(...)` into "
                  "an optimizer whose parameters are on `meta` (standing in for a GPU). Where is `exp_avg` "
                  "afterwards?"),
        choices=("on the CPU, where it was saved", "on meta, the parameters' device",
                 "load_state_dict raises a device error"),
        answer="on meta, the parameters' device",
        giveaways=("casts the state", "to the parameter's device", "follows the parameters",
                   "_process_value_according_to_param_policy"),
        reason=("`Optimizer.load_state_dict` casts each state tensor to its parameter's device (and float "
                "dtype); only Adam's `step` counter stays where it was.")),
}

ask = asker(PREDICTIONS)
