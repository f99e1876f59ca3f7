"""The environment report and the device helper tell the truth, with a GPU faked where there is none."""

import subprocess
import sys
from types import SimpleNamespace
from unittest import mock

import torch

from devicelab import best_device, collect_environment
from devicelab.__main__ import main


def _fake_gpu(name="Tesla T4", memory=15 * 2**30, major=7, minor=5):
    props = SimpleNamespace(name=name, total_memory=memory, major=major, minor=minor)
    return [
        mock.patch("torch.cuda.is_available", return_value=True),
        mock.patch("torch.cuda.device_count", return_value=1),
        mock.patch("torch.cuda.get_device_properties", return_value=props),
        mock.patch("devicelab.environment._nvidia_driver", return_value="550.54.15"),
    ]


def test_best_device_prefers_cuda_then_mps_then_cpu():
    with mock.patch("torch.cuda.is_available", return_value=True), \
         mock.patch("torch.backends.mps.is_available", return_value=True):
        assert best_device() == torch.device("cuda")
        assert best_device().index is None, "the current CUDA device, not a hard-coded cuda:0"
    with mock.patch("torch.cuda.is_available", return_value=False), \
         mock.patch("torch.backends.mps.is_available", return_value=True):
        assert best_device() == torch.device("mps")
    with mock.patch("torch.cuda.is_available", return_value=False), \
         mock.patch("torch.backends.mps.is_available", return_value=False):
        assert best_device() == torch.device("cpu")


def test_report_on_a_cpu_only_machine():
    with mock.patch("torch.cuda.is_available", return_value=False), \
         mock.patch("torch.backends.mps.is_available", return_value=False):
        report = collect_environment()
    assert report.torch_version == torch.__version__
    assert report.cuda_available is False and report.gpus == () and report.driver is None
    assert report.best_device == "cpu"
    labels = dict(report.rows())
    assert labels["CUDA GPU usable now"] == "no"
    assert "GPU cuda:0" not in labels


def test_report_lists_gpu_name_memory_capability_and_driver():
    patches = _fake_gpu()
    for p in patches:
        p.start()
    try:
        report = collect_environment()
    finally:
        for p in patches:
            p.stop()
    assert report.cuda_available and report.gpus[0].name == "Tesla T4"
    assert report.gpus[0].capability == (7, 5) and report.driver == "550.54.15"
    text = str(report)
    assert "Tesla T4, 15.0 GiB, compute capability 7.5" in text
    assert "550.54.15" in text and "Course default device    cuda" in text


def test_report_knows_colab_and_nbgrader(monkeypatch):
    monkeypatch.setitem(sys.modules, "google.colab", SimpleNamespace())
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    report = collect_environment()
    assert report.on_colab is True and report.nbgrader_execution == "autograde"
    monkeypatch.delitem(sys.modules, "google.colab")
    monkeypatch.delenv("NBGRADER_EXECUTION")
    report = collect_environment()
    assert report.on_colab is False and report.nbgrader_execution is None


def test_report_html_escapes_values():
    report = collect_environment()
    fake = report.__class__(**{**report.__dict__, "platform": "<script>"})
    html = fake._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_compiled_accelerator_is_not_availability():
    # On a CUDA build without a GPU the compiled-in accelerator is cuda while CUDA is unusable:
    # the report shows both, so lessons can teach the difference.
    report = collect_environment()
    if torch.version.cuda and not torch.cuda.is_available():
        assert report.compiled_accelerator == "cuda" and report.cuda_available is False


def test_cli_env_prints_the_report(capsys):
    assert main(["env"]) == 0
    assert "PyTorch" in capsys.readouterr().out


def test_module_entry_point_runs():
    out = subprocess.run([sys.executable, "-m", "devicelab", "env"], capture_output=True, text=True,
                         check=True)
    assert "Course default device" in out.stdout
