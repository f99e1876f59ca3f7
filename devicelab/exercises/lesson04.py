"""Practice for lesson 04: hunt the tensors that stay behind when a model moves."""

import torch
from torch import nn

from devicelab.feedback import Exercise, checker
from devicelab.predict import Prediction, asker


class Detector(nn.Module):
    """Score each row of a batch, weighted by class and position: works on the CPU, fails anywhere else."""

    def __init__(self, features: int = 8) -> None:
        super().__init__()
        self.linear = nn.Linear(features, 1)
        self.class_weight = torch.tensor([2.0])  # a plain attribute

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        position = torch.arange(x.shape[0]) / x.shape[0]  # made inside forward, with no device=
        return self.linear(x).squeeze(1) * self.class_weight + position


def _fixed_detector(fixed_detector) -> None:
    model = fixed_detector()
    assert isinstance(model, nn.Module), f"fixed_detector() should return a model (nn.Module), not {model!r}."
    assert isinstance(getattr(model, "linear", None), nn.Linear), (
        "Keep the layer's name: the fixed model should still have self.linear = nn.Linear(8, 1).")
    reference = Detector()
    model.linear.load_state_dict(reference.linear.state_dict())
    x = torch.randn(5, 8)
    got = model(x)
    assert isinstance(got, torch.Tensor) and torch.allclose(got, reference(x)), (
        "On the CPU the fixed model should compute exactly what Detector computes (fix where tensors live, "
        "not the maths).")
    buffers = dict(model.named_buffers())
    assert "class_weight" in buffers, (
        "class_weight should be a buffer: self.register_buffer('class_weight', torch.tensor([2.0])), so that "
        "model.to(device) moves it with the parameters.")
    model.to("meta")
    try:
        out = model(torch.randn(5, 8, device="meta"))
    except RuntimeError as err:
        raise AssertionError(
            "On meta the model should run, but it raised: a tensor made inside forward should be made on the "
            f"input's device (device=x.device). The error: {err}") from None
    assert out.device.type == "meta", f"the output should be on the input's device (meta), not {out.device}."


_exercises = checker(
    Exercise("fixed_detector", _fixed_detector, hints=(
        ("Move Detector to meta and call it on a meta input; tensor_table(model) shows which tensor stayed "
         "on cpu."),
        ("Two culprits: a tensor kept as a plain attribute (model.to() moves only parameters and buffers), "
         "and a tensor created inside forward without a device."),
        ("self.register_buffer('class_weight', torch.tensor([2.0])) in __init__; "
         "torch.arange(x.shape[0], device=x.device) in forward."),
    ), solution='''
import torch
from torch import nn


class FixedDetector(nn.Module):
    """Detector with its class weight registered as a buffer and its positions made on the input's device."""

    def __init__(self, features: int = 8) -> None:
        super().__init__()
        self.linear = nn.Linear(features, 1)
        self.register_buffer("class_weight", torch.tensor([2.0]))  # moves with model.to()

    def forward(self, x):
        position = torch.arange(x.shape[0], device=x.device) / x.shape[0]  # on x's device
        return self.linear(x).squeeze(1) * self.class_weight + position


def fixed_detector() -> nn.Module:
    """Return a Detector that works on any device."""
    return FixedDetector()
''', success="Both culprits found: a plain attribute and a tensor born on the CPU inside forward."),
)
check, hint, solution = _exercises.check, _exercises.hint, _exercises.solution

PREDICTIONS = {
    "meta-matmul": Prediction(
        question='`torch.ones(2, 3) @ torch.ones(3, 2, device="meta")`: what happens?',
        choices=("a device-mismatch RuntimeError", "a meta tensor of shape (2, 2)",
                 "a CPU tensor of shape (2, 2) holding 3s, the right product",
                 "a CPU tensor of shape (2, 2) holding whatever was in memory"),
        answer="a CPU tensor of shape (2, 2) holding whatever was in memory",
        giveaways=("matmul trap", "tensor instead of failing", "@ meta_tensor", "trap of meta", "uninitiali",
                   "never trust silence", "whatever happened to be in memory"),
        reason="The CPU matmul kernel does not check the meta operand's device, and the meta operand holds "
               "no numbers: the result is uninitialised CPU memory. The next cell shows it."),
    "float64-matmul": Prediction(
        question="On the CPU, no GPU involved: `torch.ones(2, 3, dtype=torch.float64) @ torch.ones(3, 2)`?",
        choices=("works, the result is float64", "works, the result is float32", "raises a dtype error"),
        answer="raises a dtype error",
        giveaways=("refuse to mix", "must have the same dtype", "to have the same dtype", "do not promote",
                   "does not promote", "promote to float64 instead", "mixing dtypes fails",
                   "mixing ... fails", "shows that error"),
        reason="Matrix products do not promote: both operands must have one dtype (elementwise `+` would "
               "promote to float64). No GPU is involved: the float64 is not the problem, the mix is."),
}
ask = asker(PREDICTIONS)
