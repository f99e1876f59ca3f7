"""The "timing lies" widget: a thin ipywidgets view over `devicelab.timing_lies`.

It uses only widgets that exist in both ipywidgets 7.7 (Colab) and 8 (JupyterLab), updates them from the
kernel's main thread while the Run button's handler runs (Colab does not render updates made from background
threads), shows an error from the timed operation instead of dying, and never waits for a click. Where widgets
are switched off (nbgrader running the notebook, or no kernel), `show_timing_lies` runs the same functions
once with small settings and shows a static chart.
"""

import time
from collections.abc import Callable, Sequence
from html import escape

from devicelab.timing_lies import (
    MethodTiming,
    Target,
    compare_matmul,
    describe_comparison,
    matmul_op,
    plot_comparisons,
)
from devicelab.ui import INERT_MESSAGE, widgets_enabled

SIZES = (128, 256, 512, 1024, 2048)


def _display(obj) -> None:
    """Display rich output in a notebook (its plain-text form outside one)."""
    from IPython.display import display

    display(obj)


class TimingLiesWidget:
    """Controls (matrix size, repeats), a Run button, progress and the bar chart, over `compare_matmul`."""

    def __init__(
        self,
        *,
        sizes: Sequence[int] = SIZES,
        size: int = 1024,
        repeats: int = 5,
        targets: Sequence[Target] | None = None,
        op_factory: Callable[[int, Target], Callable[[], object]] = matmul_op,
        min_run_time: float = 0.05,
    ) -> None:
        import ipywidgets as widgets

        if size not in sizes:
            raise ValueError(f"size {size} is not one of the offered sizes {tuple(sizes)}")
        self.targets = targets
        self.op_factory = op_factory
        self.min_run_time = min_run_time
        self.results: list[list[MethodTiming]] | None = None
        self.error: BaseException | None = None
        self.size = widgets.Dropdown(options=[(f"{n} x {n}", n) for n in sizes], value=size,
                                     description="matrices")
        self.repeats = widgets.IntSlider(value=repeats, min=1, max=25, description="repeats")
        self.button = widgets.Button(description="Run", button_style="primary", icon="play",
                                     tooltip="time an n x n matrix multiplication four ways")
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description="progress")
        self.status = widgets.HTML(value="Choose a size and press Run.")
        self.output = widgets.Output()
        self.button.on_click(self._on_click)
        self.box = widgets.VBox([
            widgets.HBox([self.size, self.repeats, self.button]),
            widgets.HBox([self.progress, self.status]),
            self.output,
        ])

    def _ipython_display_(self) -> None:
        _display(self.box)

    def _on_click(self, _button) -> None:
        self.run()

    def _step(self, message: str) -> None:
        self.progress.value = min(self.progress.value + 1, self.progress.max)
        self.status.value = escape(f"timing: {message}")

    def run(self) -> bool:
        """Time the chosen work four ways and draw the chart; on an error show it and stay usable."""
        import matplotlib.pyplot as plt

        self.button.disabled = True
        self.progress.bar_style = ""
        self.progress.value = 0
        targets = self.targets
        self.progress.max = 4 * (len(targets) if targets is not None else 2)
        started = time.perf_counter()
        try:
            results = compare_matmul(self.size.value, targets=targets, repeats=self.repeats.value,
                                     min_run_time=self.min_run_time, op_factory=self.op_factory,
                                     progress=self._step)
            figure = plot_comparisons(results)
        except Exception as error:  # noqa: BLE001  (any error from the timed code is shown, not raised)
            self.error = error
            self.progress.bar_style = "danger"
            self.status.value = ("<span style='color:#cf222e'>The operation raised "
                                 f"{escape(type(error).__name__)}: {escape(str(error))}. Change the settings "
                                 "and press Run again.</span>")
            with self.output:
                self.output.clear_output()
                print(f"{type(error).__name__}: {error}")
            return False
        finally:
            self.button.disabled = False
        self.error = None
        self.results = results
        self.progress.value = self.progress.max
        self.progress.bar_style = "success"
        self.status.value = escape(f"done in {time.perf_counter() - started:.1f} s")
        with self.output:
            self.output.clear_output(wait=True)
            _display(figure)
            print("\n\n".join(describe_comparison(r) for r in results))
        plt.close(figure)
        return True


def static_timing_lies(
    *, size: int = 512, repeats: int = 5, targets: Sequence[Target] | None = None, min_run_time: float = 0.02,
    op_factory: Callable[[int, Target], Callable[[], object]] = matmul_op,
) -> tuple[list[list[MethodTiming]], object]:
    """Run the comparison once, without any widget, and return the results and their matplotlib Figure."""
    results = compare_matmul(size, targets=targets, repeats=repeats, min_run_time=min_run_time,
                             op_factory=op_factory)
    return results, plot_comparisons(results)


def show_timing_lies(
    *, size: int = 1024, repeats: int = 5, targets: Sequence[Target] | None = None, run: bool = True,
    inert_size: int = 512, inert_repeats: int = 5,
) -> None:
    """Show the timing-lies widget (run once with the defaults), or a static chart where widgets are off."""
    if not widgets_enabled():
        import matplotlib.pyplot as plt

        print(INERT_MESSAGE)
        results, figure = static_timing_lies(size=inert_size, repeats=inert_repeats, targets=targets)
        _display(figure)
        plt.close(figure)
        print("\n\n".join(describe_comparison(r) for r in results))
        return
    widget = TimingLiesWidget(size=size, repeats=repeats, targets=targets)
    _display(widget.box)
    if run:
        widget.run()
