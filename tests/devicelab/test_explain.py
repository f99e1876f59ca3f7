"""explain() turns device and dtype errors into plain language; explain_errors() prints it and re-raises."""

import io
from collections.abc import Callable

import pytest
import torch
from torch import nn

from devicelab.explain import (
    CHECKPOINT_DEVICE,
    DEVICE_MISMATCH,
    DTYPE_MISMATCH,
    META_HAS_NO_DATA,
    NO_GPU,
    NUMPY_NEEDS_CPU,
    NUMPY_REQUIRES_GRAD,
    Explanation,
    explain,
    explain_errors,
)

# The CUDA messages of torch 2.14.1, as docs/facts.md records them (no GPU needed to test the parsing).
CUDA_PLUS_CPU = ("Expected all tensors to be on the same device, but found at least two devices, cuda:0 and "
                 "cpu!")
LINEAR_ON_CUDA = ("Expected all tensors to be on the same device, but got mat1 is on cpu, different from "
                  "other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)")
NUMPY_ON_CUDA = ("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to "
                 "host memory first.")


def raised(fn: Callable[[], object]) -> Exception:
    """Return the exception that `fn` raises (fail the test if it raises none)."""
    with pytest.raises(Exception) as info:
        fn()
    return info.value


# Real errors, produced on the CPU


def test_cpu_plus_meta_is_a_device_mismatch_naming_both_devices():
    exc = raised(lambda: torch.ones(2) + torch.ones(2, device="meta"))
    assert isinstance(exc, RuntimeError)
    explanation = explain(exc)
    assert explanation.kind == DEVICE_MISMATCH
    assert set(explanation.devices) == {"cpu", "meta"}
    assert ".to(" in explanation.code


def test_a_linear_layer_on_meta_with_a_cpu_input_is_a_device_mismatch():
    exc = raised(lambda: nn.Linear(3, 2).to("meta")(torch.ones(1, 3)))
    explanation = explain(exc)
    assert explanation.kind == DEVICE_MISMATCH
    assert set(explanation.devices) == {"cpu", "meta"}
    assert "no values" in explanation.what


def test_float64_matmul_float32_is_a_dtype_mismatch_with_both_dtypes():
    exc = raised(lambda: torch.ones(2, 3, dtype=torch.float64) @ torch.ones(3, 2))
    explanation = explain(exc)
    assert explanation.kind == DTYPE_MISMATCH
    assert explanation.dtypes == ("float64", "float32")
    assert explanation.devices == ()
    assert "torch.float32" in explanation.code


def test_a_float64_input_to_a_float32_linear_layer_is_a_dtype_mismatch():
    explanation = explain(raised(lambda: nn.Linear(3, 2)(torch.ones(1, 3, dtype=torch.float64))))
    assert explanation.kind == DTYPE_MISMATCH
    assert explanation.dtypes == ("float64", "float32")


@pytest.mark.parametrize("make", [
    lambda: torch.bmm(torch.ones(1, 2, 2, dtype=torch.float64), torch.ones(1, 2, 2)),
    lambda: nn.Conv2d(1, 1, 3)(torch.ones(1, 1, 4, 4, dtype=torch.float64)),
    lambda: torch.ones(2, dtype=torch.float64) @ torch.ones(2),
])
def test_other_dtype_messages_are_recognised(make):
    explanation = explain(raised(make))
    assert explanation.kind == DTYPE_MISMATCH
    assert set(explanation.dtypes) == {"float64", "float32"}


def test_numpy_on_a_tensor_that_requires_grad_says_detach():
    exc = raised(lambda: torch.ones(2, requires_grad=True).numpy())
    assert isinstance(exc, RuntimeError)
    explanation = explain(exc)
    assert explanation.kind == NUMPY_REQUIRES_GRAD
    assert "detach()" in explanation.code


def test_numpy_on_a_meta_tensor_says_there_are_no_values():
    exc = raised(lambda: torch.ones(2, device="meta").numpy())
    assert isinstance(exc, TypeError)
    explanation = explain(exc)
    assert explanation.kind == NUMPY_NEEDS_CPU
    assert explanation.devices == ("meta",)
    assert "no" in explanation.title and "values" in explanation.title


@pytest.mark.parametrize("make", [
    lambda: torch.ones(2, device="meta").cpu(),
    lambda: torch.tensor(1.0, device="meta").item(),
])
def test_reading_values_out_of_a_meta_tensor_is_recognised(make):
    explanation = explain(raised(make))
    assert explanation.kind == META_HAS_NO_DATA
    assert explanation.devices == ("meta",)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a usable GPU loads the file without error")
def test_loading_onto_cuda_without_a_gpu_suggests_map_location(tmp_path):
    path = tmp_path / "t.pt"
    torch.save(torch.ones(2), path)
    exc = raised(lambda: torch.load(path, map_location="cuda"))
    explanation = explain(exc)
    assert explanation.kind == CHECKPOINT_DEVICE
    assert explanation.devices == ("cuda",)
    assert 'map_location="cpu"' in explanation.code


@pytest.mark.skipif(torch.cuda.is_available(), reason="a usable GPU accepts .cuda()")
def test_cuda_on_a_machine_without_a_gpu_is_recognised():
    explanation = explain(raised(lambda: torch.ones(1).cuda()))
    assert explanation.kind == NO_GPU
    assert "best_device" in explanation.code


# The CUDA wording from FACTS.md, as constructed exceptions


def test_cuda_plus_cpu_names_both_devices():
    explanation = explain(RuntimeError(CUDA_PLUS_CPU))
    assert explanation.kind == DEVICE_MISMATCH
    assert explanation.devices == ("cuda:0", "cpu")
    assert "cuda:0" in explanation.title and "cpu" in explanation.title


def test_linear_on_cuda_names_the_argument_and_the_kernel():
    explanation = explain(RuntimeError(LINEAR_ON_CUDA))
    assert explanation.kind == DEVICE_MISMATCH
    assert explanation.devices == ("cuda:0", "cpu")
    assert "`mat1` is on cpu" in explanation.what
    assert "addmm" in explanation.what


def test_numpy_on_cuda_says_copy_to_the_host():
    explanation = explain(TypeError(NUMPY_ON_CUDA))
    assert explanation.kind == NUMPY_NEEDS_CPU
    assert explanation.devices == ("cuda:0",)
    assert ".cpu().numpy()" in explanation.code


def test_a_missing_cuda_device_index_in_a_checkpoint_is_recognised():
    message = ("Attempting to deserialize object on CUDA device 1 but torch.cuda.device_count() is 1. Please "
               "use torch.load with map_location to map your storages to an existing device.")
    explanation = explain(RuntimeError(message))
    assert explanation.kind == CHECKPOINT_DEVICE
    assert explanation.devices == ("cuda:1",)


def test_convolution_type_names_tell_device_from_dtype_problems():
    device_problem = ("Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) should be the "
                      "same or input should be a MKLDNN tensor and weight is a dense tensor")
    dtype_problem = ("Input type (torch.cuda.DoubleTensor) and weight type (torch.cuda.FloatTensor) should "
                     "be the same")
    assert explain(RuntimeError(device_problem)).devices == ("cpu", "cuda")
    assert explain(RuntimeError(dtype_problem)).dtypes == ("float64", "float32")


def test_matching_survives_changes_of_case_and_surrounding_text():
    reworded = "RuntimeError: expected ALL tensors to be on the SAME DEVICE; got cuda:1 and cpu (torch 9.9)"
    explanation = explain(RuntimeError(reworded))
    assert explanation.kind == DEVICE_MISMATCH
    assert explanation.devices == ("cuda:1", "cpu")


def test_a_message_string_is_explained_too():
    assert explain(CUDA_PLUS_CPU).kind == DEVICE_MISMATCH


def test_an_error_raised_while_handling_a_device_error_is_traced_back_to_it():
    def wrapped():
        try:
            torch.ones(2) + torch.ones(2, device="meta")
        except RuntimeError as exc:
            raise ValueError("training step failed") from exc

    assert explain(raised(wrapped)).kind == DEVICE_MISMATCH


# Anything else: a plain answer, never a crash


@pytest.mark.parametrize("thing", [
    ValueError("bad value"), KeyError("weight"), ZeroDivisionError("division by zero"),
    RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), RuntimeError(""),
    "just some text", "", None, 42, object(),
])
def test_anything_unrelated_gets_a_plain_not_recognised_answer(thing):
    explanation = explain(thing)
    assert isinstance(explanation, Explanation)
    assert not explanation.recognised
    assert explanation.kind is None
    assert "not a device or dtype problem I recognise" in str(explanation)


def test_a_shape_error_is_not_mistaken_for_a_device_error():
    exc = raised(lambda: torch.ones(2, 3) @ torch.ones(2, 3))
    assert not explain(exc).recognised


def test_an_explanation_prints_title_cause_fix_and_code():
    explanation = explain(RuntimeError(CUDA_PLUS_CPU))
    lines = str(explanation).splitlines()
    assert lines[0] == explanation.title
    assert lines[1].startswith("What went wrong:")
    assert lines[2].startswith("Fix:")
    code = explanation.code.splitlines()
    assert [line.strip() for line in lines[3:3 + len(code)]] == code
    assert "<b>" in explanation._repr_html_()


def test_the_fix_moves_the_input_only_when_the_input_is_the_culprit():
    """mat1 of nn.Linear is the input: move it to the model's device. Any other tensor (a module's plain
    attribute, a tensor made in forward) has to be found first: moving the input would not help."""
    into_linear = explain(RuntimeError(
        "Expected all tensors to be on the same device, but got mat1 is on cpu, different from other tensors "
        "on cuda:0 (when checking argument in method wrapper_CUDA_addmm)"))
    elementwise = explain(raised(lambda: torch.ones(2, device="meta") * torch.ones(2)))
    assert into_linear.code == "x = x.to(next(model.parameters()).device)", into_linear.code
    assert "tensor_table" in elementwise.code and "x = x.to" not in elementwise.code


# explain_errors()


def test_explain_errors_prints_the_explanation_and_reraises_the_same_exception():
    out = io.StringIO()
    with pytest.raises(RuntimeError) as info, explain_errors(file=out):
        torch.ones(2) + torch.ones(2, device="meta")
    assert "Device mismatch" in out.getvalue()
    assert explain(info.value).kind == DEVICE_MISMATCH


def test_explain_errors_stays_silent_for_unrelated_errors(capsys):
    with pytest.raises(KeyError), explain_errors():
        {}["missing"]
    assert capsys.readouterr().out == ""


def test_explain_errors_prints_to_stdout_by_default(capsys):
    with pytest.raises(TypeError), explain_errors():
        torch.ones(2, device="meta").numpy()
    assert "NumPy" in capsys.readouterr().out


def test_explain_errors_does_nothing_when_nothing_fails(capsys):
    with explain_errors():
        result = torch.ones(2) + 1
    assert torch.equal(result, torch.full((2,), 2.0))
    assert capsys.readouterr().out == ""
