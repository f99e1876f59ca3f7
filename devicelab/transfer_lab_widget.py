"""The transfer lab widget: a thin view over `devicelab.transfer_lab`.

Works with ipywidgets 7.7 (Colab) and 8, using only widgets both have (Dropdown, ToggleButtons, Checkbox,
Button, IntProgress, HTML, VBox/HBox); the plot and the table are HTML, so every update is a plain widget
state change made from the kernel's main thread. A click on Run schedules the sweep one size at a time on the
kernel's event loop, which lets the kernel receive a click on Stop between two sizes. Under nbgrader or
outside a kernel, nothing interactive is shown: a quick sweep runs once and its plot is shown instead.
"""

import time
from html import escape
from typing import Any

from devicelab import copybench as cb
from devicelab.transfer_lab import (
    MACHINE,
    REPEAT_CHOICES,
    SIMULATED,
    SIZE_CHOICES,
    LabConfig,
    LabState,
    Run,
    Scheduler,
    SweepStepper,
    backend_options,
    banner,
    event_loop_scheduler,
    lab_choices,
    png_html,
    render_png,
    results_table_html,
    run_quick,
    start_sweep,
)
from devicelab.ui import INERT_MESSAGE, widgets_enabled
from devicelab.units import KiB, MiB, format_bytes

AUTO = "auto"
PLOT_INTERVAL_S = 0.25  # redraw the plot at most this often while a sweep runs (a redraw takes ~0.1 s)


def transfer_lab(*, schedule: Scheduler | str | None = AUTO, cuda: bool | None = None) -> Any:
    """Return the transfer lab: a live widget in a Jupyter kernel, else a static quick sweep (same core)."""
    if not widgets_enabled():
        return StaticTransferLab(run_quick())
    return TransferLabWidget(schedule=schedule, cuda=cuda)


class StaticTransferLab:
    """What the lab shows when it cannot be interactive: a quick sweep's plot and table, and why."""

    def __init__(self, state: LabState):
        self.state = state

    def __repr__(self) -> str:
        lines = [INERT_MESSAGE]
        for run in self.state.runs:  # one run of each copy: named by the copy alone
            lines.append(f"{run.config.label()}: {run.status}")
            lines += [f"  {cb.table_row(r)}" for r in run.results]
        return "\n".join(lines)

    def _ipython_display_(self) -> None:
        from IPython.display import HTML, Image, display

        display(HTML(f"<p><i>{escape(INERT_MESSAGE)}</i></p>"))
        display(Image(data=render_png(self.state.runs), format="png"))


class TransferLabWidget:
    """Choose a copy, Run it over a range of sizes, Stop it; the plot keeps earlier runs for comparison."""

    def __init__(self, *, schedule: Scheduler | str | None = AUTO, cuda: bool | None = None,
                 state: LabState | None = None):
        import ipywidgets as w

        self.cuda = cb.cuda_usable() if cuda is None else cuda
        self.state = state if state is not None else LabState()
        self._schedule = schedule
        self.stepper: SweepStepper | None = None
        self.current: Run | None = None
        self._updating = False
        self._started = 0.0
        self._first_point_s: float | None = None
        self._plotted_at = 0.0
        wide = {"description_width": "initial"}
        sizes = [(format_bytes(s), s) for s in SIZE_CHOICES]

        self.banner = w.HTML()
        self.switch_button = w.Button(description="Simulate a T4 GPU", button_style="info")
        self.backend = w.Dropdown(options=backend_options(self.cuda), value=MACHINE, description="Copies on",
                                  style=wide)
        self.direction = w.ToggleButtons(options=["h2h"], description="Direction", style=wide)
        self.host = w.ToggleButtons(options=list(cb.HOSTS), value="pageable", description="Host memory",
                                    style=wide)
        self.non_blocking = w.Checkbox(value=False, description="non_blocking=True", style=wide)
        self.smallest = w.Dropdown(options=sizes, value=4 * KiB, description="From", style=wide)
        self.largest = w.Dropdown(options=sizes, value=(256 if self.cuda else 64) * MiB, description="to",
                                  style=wide)
        self.repeats = w.Dropdown(options=list(REPEAT_CHOICES), value=3, description="Repeats", style=wide)
        self.run_button = w.Button(description="Run", button_style="primary")
        self.stop_button = w.Button(description="Stop", button_style="warning", disabled=True)
        self.clear_button = w.Button(description="Clear plot")
        self.progress = w.IntProgress(value=0, min=0, max=1, description="Progress", style=wide)
        self.reason = w.HTML()
        self.status = w.HTML(value="Choose a copy and press Run.")
        self.plot = w.HTML()
        self.table = w.HTML()

        self.backend.observe(self._refresh, names="value")
        self.direction.observe(self._refresh, names="value")
        self.run_button.on_click(self._on_run)
        self.stop_button.on_click(self._on_stop)
        self.clear_button.on_click(self._on_clear)
        self.switch_button.on_click(self._on_switch)
        self.widget = w.VBox([
            w.HBox([self.switch_button, self.banner]),
            self.backend,
            self.direction,
            w.HBox([self.host, self.non_blocking]),
            w.HBox([self.smallest, self.largest, self.repeats]),
            self.reason,
            w.HBox([self.run_button, self.stop_button, self.clear_button, self.progress]),
            self.status,
            self.plot,
            self.table,
        ])
        self._refresh()
        self._redraw()  # also pays matplotlib's first-use cost now, not after Run

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)

    # ----- reading and updating the controls ---------------------------------------------------------

    def config(self) -> LabConfig:
        """Return the sweep the controls describe."""
        choices = lab_choices(self.backend.value, self.direction.value, self.cuda)
        return LabConfig(backend=self.backend.value, direction=self.direction.value,
                         host=self.host.value if choices.host_enabled else "pageable",
                         non_blocking=bool(self.non_blocking.value) and choices.non_blocking_enabled,
                         smallest=self.smallest.value, largest=self.largest.value, repeats=self.repeats.value)

    def _refresh(self, _change: object = None) -> None:
        """Offer what the chosen backend and direction allow, and say why anything is switched off."""
        if self._updating:
            return
        self._updating = True
        try:
            choices = lab_choices(self.backend.value, self.direction.value, self.cuda)
            if tuple(self.direction.options) != choices.directions:
                keep = self.direction.value if self.direction.value in choices.directions else None
                self.direction.options = list(choices.directions)
                self.direction.value = keep or choices.directions[0]
                choices = lab_choices(self.backend.value, self.direction.value, self.cuda)
            running = self.stepper is not None and self.stepper.running
            self.host.disabled = running or not choices.host_enabled
            if not choices.host_enabled:
                self.host.value = "pageable"
            self.non_blocking.disabled = running or not choices.non_blocking_enabled
            if not choices.non_blocking_enabled:
                self.non_blocking.value = False
            self.reason.value = (f"<span style='color:#666'><i>{escape(choices.reason)}</i></span>"
                                 if choices.reason else "")
            said = banner(self.backend.value, self.cuda)
            self.banner.value = f"<b>{escape(said)}</b>" if said else ""
            # the one click between what this machine can do and the simulated GPU (none where a GPU is)
            self.switch_button.layout.display = None if said else "none"
            self.switch_button.description = ("Simulate a T4 GPU" if self.backend.value == MACHINE
                                              else "Back to this machine")
            self.switch_button.disabled = running
        finally:
            self._updating = False

    def _set_running(self, running: bool) -> None:
        for control in (self.backend, self.direction, self.smallest, self.largest, self.repeats,
                        self.run_button, self.clear_button):
            control.disabled = running
        self.stop_button.disabled = not running
        self._refresh()

    def _redraw(self, *, force: bool = True) -> None:
        """Update the table, and the plot unless it was drawn less than PLOT_INTERVAL_S ago (or `force`)."""
        now = time.perf_counter()
        if force or now - self._plotted_at >= PLOT_INTERVAL_S:
            self.plot.value = png_html(render_png(self.state.runs))
            self._plotted_at = now
        self.table.value = results_table_html(self.current)

    # ----- buttons ------------------------------------------------------------------------------------

    def _on_run(self, _button: object = None) -> None:
        if self.stepper is not None and self.stepper.running:
            return
        config = self.config()
        try:
            results = start_sweep(config)
        except (cb.NoGPUError, cb.CopyMemoryError, TypeError, ValueError) as error:
            self.status.value = f"<b style='color:#cf222e'>Cannot run:</b> {escape(str(error))}"
            return
        self.current = self.state.new_run(config)
        self.progress.max = len(config.sizes())
        self.progress.value = 0
        schedule = event_loop_scheduler() if self._schedule == AUTO else self._schedule
        self.stepper = SweepStepper(results, schedule, self._on_result, self._on_finish)
        self._started = time.perf_counter()
        self._first_point_s = None
        self._set_running(True)
        self.status.value = f"Running {escape(self.current.label)} ..."
        self.stepper.start()

    def _on_switch(self, _button: object = None) -> None:
        """Switch between this machine and the simulated GPU (the copy most worth seeing: h2d)."""
        if self.stepper is not None and self.stepper.running:
            return
        self.backend.value = SIMULATED if self.backend.value == MACHINE else MACHINE

    def _on_stop(self, _button: object = None) -> None:
        if self.stepper is not None and self.stepper.running:
            self.stepper.stop()
            self.status.value = "Stopping after the current size ..."

    def _on_clear(self, _button: object = None) -> None:
        if self.stepper is not None and self.stepper.running:
            return
        self.state.clear()
        self.current = None
        self.progress.value = 0
        self.status.value = "Cleared. Choose a copy and press Run."
        self._redraw()

    # ----- the sweep reports back ---------------------------------------------------------------------

    def _on_result(self, result: cb.CopyResult) -> None:
        self.current.results.append(result)
        self.progress.value = len(self.current.results)
        first = self._first_point_s is None
        self._redraw(force=first)
        if first:
            self._first_point_s = time.perf_counter() - self._started

    def _on_finish(self, state: str, error: BaseException | None) -> None:
        self._set_running(False)  # controls first: the status line then announces a usable widget
        run = self.current
        count, total = len(run.results), self.progress.max
        seconds = time.perf_counter() - self._started
        if error is not None:
            run.status = f"error: {error}"
            self.status.value = (f"<b style='color:#cf222e'>Stopped by an error</b> after {count} of {total} "
                                 f"sizes: {escape(str(error))}")
        elif state == "stopped":
            run.status = f"stopped after {count} of {total} sizes"
            self.status.value = f"Stopped after {count} of {total} sizes ({seconds:.1f} s)."
        else:
            run.status = "done"
            self.status.value = f"Done: {count} sizes in {seconds:.1f} s."
        self._redraw()
