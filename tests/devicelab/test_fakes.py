"""devicelab.fakes: the pretend machine and the pretend GPU tensor behave like the real thing where tests
look.
"""

import numpy as np
import pytest
import torch

from devicelab.fakes import fake_machine, on_device

pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy keyword")


def availability():
    return (torch.cuda.is_available(), torch.cuda.device_count(), torch.backends.mps.is_available())


def test_fake_machine_answers_and_restores_everything():
    before = (torch.cuda.is_available, torch.cuda.device_count, torch.cuda.current_device,
              torch.backends.mps.is_available, torch.accelerator.current_device_index)
    with fake_machine(cuda=2, mps=True, current=1):
        assert availability() == (True, 2, True)
        assert torch.cuda.current_device() == 1 and torch.accelerator.current_device_index() == 1
    with pytest.raises(KeyError), fake_machine(cuda=1):
        raise KeyError("an error inside the block")
    with fake_machine():
        assert availability() == (False, 0, False)
        with pytest.raises(RuntimeError, match="NVIDIA driver"):
            torch.cuda.current_device()  # as PyTorch does on a machine without a GPU
    after = (torch.cuda.is_available, torch.cuda.device_count, torch.cuda.current_device,
             torch.backends.mps.is_available, torch.accelerator.current_device_index)
    assert after == before
    with pytest.raises(ValueError), fake_machine(cuda=2, current=2):
        pass


def test_the_faked_current_device_takes_no_arguments_as_pytorch_s_own():
    """A student's torch.cuda.current_device("cuda") raises TypeError in PyTorch: faked, it must too."""
    with fake_machine(cuda=2, current=1):
        for asked in (torch.cuda.current_device, torch.accelerator.current_device_index):
            with pytest.raises(TypeError):
                asked("cuda")


def test_on_device_reports_its_device_and_refuses_numpy_like_a_cuda_tensor():
    t = on_device(torch.arange(3.0), "cuda:1")
    assert t.device == torch.device("cuda:1") and t.is_cuda and not t.is_cpu and t.get_device() == 1
    assert isinstance(t, torch.Tensor) and t.dim() == 1 and t.nbytes == 12
    with pytest.raises(TypeError, match="can't convert cuda:1 device type tensor to numpy"):
        t.numpy()
    with pytest.raises(TypeError):
        np.array(t)
    host = t.cpu()
    assert type(host) is torch.Tensor and host.device.type == "cpu" and torch.equal(host, torch.arange(3.0))
    host[0] = 7.0
    assert t.as_subclass(torch.Tensor)[0] == 0.0, "a copy from the GPU shares no memory"
    assert np.array_equal(t.numpy(force=True), [0.0, 1.0, 2.0])
    assert (t + 1).device == torch.device("cuda:1") and t.detach().device == torch.device("cuda:1")
    target = torch.zeros(3)
    # a host buffer written in place stays there
    assert target.copy_(t) is target and type(target) is torch.Tensor
    assert type(torch.empty_like(t, device="cpu")) is torch.Tensor


@pytest.mark.parametrize("current", [0, 1])
def test_to_hands_back_the_tensor_itself_exactly_when_pytorch_does(current):
    # aten/src/ATen/native/TensorConversions.cpp: to() gives an index-less device the current one
    # (ensure_has_index), then returns self when device, dtype (and layout) are equal and copy=False.
    with fake_machine(cuda=2, current=current):
        for where in ("cuda:0", "cuda:1"):
            t = on_device(torch.ones(2), where)
            mine = where == f"cuda:{current}"
            assert (t.to("cuda") is t) == mine and (t.cuda() is t) == mine
            assert (t.to(torch.device("cuda"), torch.float32) is t) == mine
            assert (t.to(device="cuda", dtype=torch.float32) is t) == mine
            assert t.to(where) is t and t.to(torch.float32) is t and t.to(t) is t
            assert t.to(where, copy=True) is not t and t.to(where, torch.float32, False, True) is not t
            moved = t.to("cuda")
            assert moved.device == torch.device("cuda", current), "plain cuda goes to the current GPU"
            converted = t.to(torch.float64)
            assert converted is not t and converted.device == t.device and converted.dtype == torch.float64
            assert t.to("meta").device.type == "meta" and type(t.to("cpu")) is torch.Tensor


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU to compare with")
def test_on_device_agrees_with_a_real_gpu_tensor():
    real = torch.ones(2, device="cuda:0")
    fake = on_device(torch.ones(2), "cuda:0")
    with fake_machine(cuda=torch.cuda.device_count(), current=torch.cuda.current_device()):
        for args in [("cuda",), ("cuda:0",), (torch.float64,), ("cuda", torch.float32), ("cpu",)]:
            assert (real.to(*args) is real) == (fake.to(*args) is fake), args
