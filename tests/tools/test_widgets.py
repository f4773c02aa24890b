"""Every chapter with an ipywidgets control, run top to bottom in one kernel, then its widgets worked as a
learner works them after Run All: each interact function called over its controls' ranges (both ends and a
few values between), each button clicked. A widget that reads a name a later cell reassigns fails here,
though it passed while its own cell ran."""
import json
import os
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from queue import Empty

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

from tritonllm_course.notebook import runs_exercises_only, unfilled_exercise
from tritonllm_course.notebooks_tools import widget_chapters

MARK = "WIDGET-PROBE "


# Runs in the chapter's kernel after its last cell. Errors inside widget callbacks never reach the cell:
# ipywidgets hands them to the shell's showtraceback (interact's update, a button's click handlers, an
# Output widget's `with` block), so the probe replaces showtraceback and records them.
PROBE = r'''
def _widget_probe():
    import itertools, json, resource, sys, time, traceback
    t0, cpu0 = time.perf_counter(), time.process_time()
    import ipywidgets as W
    from IPython import get_ipython
    try:
        from ipywidgets.widgets.widget import _instances as live
    except ImportError:                                   # ipywidgets 7
        live = W.Widget.widgets
    live = list(live.values())
    ip, errors = get_ipython(), []

    def record(exc_tuple=None, *args, **kwargs):
        etype, value, tb = exc_tuple or sys.exc_info()
        errors.append("".join(traceback.format_exception(etype, value, tb)))

    def values(c):                                        # a few values of one control, both ends included
        if isinstance(c, W.fixed):
            return [c.value]
        if hasattr(c, "_options_values"):                 # Dropdown, Select, RadioButtons, SelectionSlider...
            opts = list(c._options_values)
            return opts if len(opts) <= 5 else [opts[0], opts[1], opts[len(opts) // 2], opts[-2], opts[-1]]
        if isinstance(c.value, bool):
            return [False, True]
        if hasattr(c, "min") and hasattr(c, "max") and not isinstance(c.value, tuple):
            lo, hi = c.min, c.max
            step = getattr(c, "step", None) or 1
            n = int(round((hi - lo) / step))
            picks = range(n + 1) if n <= 8 else sorted({0, 1, n // 2, n - 1, n})
            vals = [min(hi, lo + i * step) for i in picks]
            if isinstance(c.value, int):
                vals = [int(v) for v in vals]
            else:
                vals = [round(v, 12) for v in vals]
            if isinstance(c, W.FloatLogSlider):
                vals = [c.base ** v for v in vals]
            return vals
        if hasattr(c, "min") and isinstance(c.value, tuple):   # range sliders
            return [(c.min, c.min), (c.min, c.max), (c.max, c.max)]
        return [c.value]

    def combos(controls):
        vals = [values(c) for c in controls]
        total = 1
        for v in vals:
            total *= len(v)
        if total <= 40:
            return list(itertools.product(*vals))
        default = [c.value for c in controls]
        out = [tuple(v[0] for v in vals), tuple(v[-1] for v in vals)]
        if len(vals) <= 5:                                # every corner: each control at one of its ends
            out += list(itertools.product(*[(v[0], v[-1]) for v in vals]))
        for i, v in enumerate(vals):                      # each control over its values, the others as left
            out += [tuple(default[:i] + [x] + default[i + 1:]) for x in v]
        return list(dict.fromkeys(out))

    report, interactives = [], [w for w in live if isinstance(w, W.interactive)]
    manual_buttons = {id(getattr(w, "manual_button", None)) for w in interactives}
    saved, ip.showtraceback = ip.showtraceback, record
    try:
        for w in interactives:
            controls, detached = list(w.kwargs_widgets), []
            for c in controls:                            # one call per combination, made below
                try:
                    c.unobserve(w.update, names="value")
                    detached.append(c)
                except (ValueError, KeyError):
                    pass
            default = [c.value for c in controls]
            entry = {"widget": f"interact({getattr(w.f, '__name__', w.f)})", "calls": 0, "errors": [],
                     "controls": {c._kwarg: values(c) for c in controls}}
            for combo in combos(controls):
                for c, v in zip(controls, combo):
                    if not isinstance(c, W.fixed):
                        c.value = v
                before = len(errors)
                w.update()
                entry["calls"] += 1
                kwargs = {c._kwarg: v for c, v in zip(controls, combo)}
                entry["errors"] += [f"{kwargs}:\n{e}" for e in errors[before:]]
            for c, v in zip(controls, default):
                if not isinstance(c, W.fixed):
                    c.value = v
            for c in detached:
                c.observe(w.update, names="value")
            report.append(entry)
        buttons = [b for b in live if isinstance(b, W.Button) and b._click_handlers.callbacks
                   and id(b) not in manual_buttons]
        texts = [t for t in live if isinstance(t, (W.Text, W.Textarea))]
        for b in buttons:                                 # in the order they were made, each twice in a row
            for _ in range(2):
                for t in texts:                           # a message to send, where a box is empty
                    if not t.value:
                        t.value = "Hello"
                before = len(errors)
                b.click()
                report.append({"widget": f"button {b.description!r}", "calls": 1, "errors": errors[before:]})
    finally:
        ip.showtraceback = saved
    usage = resource.getrusage(resource.RUSAGE_SELF)
    timing = {"probe_s": time.perf_counter() - t0, "probe_cpu_s": time.process_time() - cpu0,
              "kernel_cpu_s": usage.ru_utime + usage.ru_stime}
    print("''' + MARK + r'''" + json.dumps({"widgets": report, "timing": timing}, default=str))

_widget_probe()
'''


# The longest one cell may take, the probe's included: a cell past it fails the test, named. The slowest cell of a
# widget chapter takes about 25 s on a loaded 2-core CPU (in 27_finale), and a whole widget chapter takes 34-86 s on
# the H200: 240 s is ten times the one and well above the other.
CELL_LIMIT_S = 240
# The longest the kernel may take to send what a cell printed after its reply (nbclient's default is 4 s, and
# what arrives later is dropped without a word: here the probe's report would be lost). Past it: a failure.
IOPUB_LIMIT_S = 60
# How long one wait on a kernel socket lasts before the socket is looked at again (`_sliced`).
POLL_SLICE_S = 1.0


def _sliced(get_msg, late: list | None = None):
    """`get_msg` of a kernel client's channel, its wait cut into slices of POLL_SLICE_S, each ending in a
    look at the socket itself; same timeout, same Empty at its end.

    Why: nbclient waits for a cell's reply in one `get_msg(timeout=cell limit)`, a zmq.asyncio poll woken by
    the socket's edge-triggered file descriptor. Under load a wake-up can be lost: the reply then sits in the
    socket, the kernel idle, until the poll's timer fires and its final zmq_poll(0) finds it, and the cell
    passes after the whole limit (a widget chapter sat 15 minutes that way under the former 900 s; on a loaded
    2-core CPU two chapters at once got replies 296 and 299 s after the kernel sent them, as 300 s polls ran
    out, their iopub messages as late). A lost wake-up now costs at most one slice.
    `late` (where given) gets the seconds between the kernel sending and this receiving each message that came
    a second or more after it was sent: lost wake-ups, or a loaded host."""
    async def get(timeout: float | None = None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                msg = await get_msg(timeout=POLL_SLICE_S if left is None else min(POLL_SLICE_S, left))
            except Empty:
                if left is not None and left <= POLL_SLICE_S:
                    raise
                continue
            sent = msg.get("header", {}).get("date") if isinstance(msg, dict) else None
            if late is not None and isinstance(sent, datetime) and sent.tzinfo is not None:
                if (lag := (datetime.now(timezone.utc) - sent).total_seconds()) >= 1.0:
                    late.append(lag)
            return msg
    return get


class BoundedClient(NotebookClient):
    """nbclient with every wait bounded and short: a cell past CELL_LIMIT_S, or its output later than
    IOPUB_LIMIT_S after its reply, fails (CellTimeoutError); the sockets are polled in slices (`_sliced`).
    `running` is the cell last sent to the kernel, (index in the notebook, cell), for the failure."""

    def __init__(self, nb, **kwargs):
        super().__init__(nb, timeout=CELL_LIMIT_S, iopub_timeout=IOPUB_LIMIT_S, raise_on_iopub_timeout=True,
                         kernel_name="python3", on_cell_execute=self._started, **kwargs)
        self.running, self.late = None, []

    def _started(self, cell, cell_index):
        self.running = (cell_index, cell)

    async def async_start_new_kernel_client(self):
        kc = await super().async_start_new_kernel_client()
        for channel in (kc.shell_channel, kc.iopub_channel):
            channel.get_msg = _sliced(channel.get_msg, self.late)
        return kc

    def timed_out(self, error: CellTimeoutError) -> str:
        """One line for a cell that ran past its limit: which cell, and which wait ended."""
        index, cell = self.running or (None, None)
        lines = cell.source.strip().splitlines() if cell is not None else []
        what = ("the widget probe" if index == len(self.nb.cells) - 1 else
                f"cell {index} ({lines[0][:80]!r})" if lines else f"cell {index}")
        said = " ".join(str(error).strip().splitlines()[:2])
        return f"{what} ran past its limit: {said} (CELL_LIMIT_S={CELL_LIMIT_S}, IOPUB_LIMIT_S={IOPUB_LIMIT_S})"


def probe_chapter(path: Path) -> tuple[list[dict], dict]:
    """Run the chapter, then the probe in the same kernel: the probe's report per widget, and the seconds it
    took (`seconds`: all of it; `probe_s`: the widget calls; `kernel_cpu_s`: the kernel's CPU time;
    `slowest_cell_s`: the longest cell). A cell past CELL_LIMIT_S fails, naming the cell."""
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    t0 = time.perf_counter()
    client = BoundedClient(nb, resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
    except CellTimeoutError as e:
        pytest.fail(f"{path.name}: {client.timed_out(e)}", pytrace=False)
    seconds = time.perf_counter() - t0
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.output_type == "stream")
    line = next((ln for ln in text.splitlines() if ln.startswith(MARK)), None)
    assert line is not None, f"{path.name}: the widget probe printed no report:\n{text}"
    probe = json.loads(line[len(MARK):])
    return probe["widgets"], {"seconds": seconds, "slowest_cell_s": max(map(_cell_seconds, nb.cells)),
                              "late": len(client.late), "latest_s": max(client.late, default=0.0),
                              **probe["timing"]}


def _cell_seconds(cell) -> float:
    """A run cell's seconds in the kernel, from its input's arrival to its reply (nbclient's record_timing)."""
    times = cell.get("metadata", {}).get("execution", {})
    if "iopub.execute_input" not in times or "shell.execute_reply" not in times:
        return 0.0
    start, end = (datetime.fromisoformat(times[k]) for k in ("iopub.execute_input", "shell.execute_reply"))
    return (end - start).total_seconds()


def test_the_chapters_with_widgets_are_found():
    names = [p.name for p in widget_chapters()]
    assert "23_flash_attention.ipynb" in names and "01_triton_basics.ipynb" in names, names


@pytest.mark.parametrize("path", widget_chapters(), ids=lambda p: p.stem)
def test_every_widget_works_after_run_all(path, monkeypatch):
    monkeypatch.setenv("TRITONLLM_KERNELS", os.environ.get("TRITONLLM_KERNELS", "solutions"))
    try:
        report, timing = probe_chapter(path)
    except CellExecutionError as e:   # in a student version: the chapter stops at an unfilled exercise
        if not runs_exercises_only() or (message := unfilled_exercise(e.ename, e.evalue)) is None:
            raise
        pytest.skip(f"{path.name} needs an exercise not filled in yet: {message}")
    assert report, f"{path.name} has widget code but the probe found no interact function or button"
    failures = [f"{e['widget']}: {err}" for e in report for err in e["errors"]]
    assert not failures, f"{path.name}: {len(failures)} widget call(s) failed after Run All:\n" + "\n".join(failures)
    calls = sum(e["calls"] for e in report)
    print(f"{path.name}: {calls} widget calls after Run All; {timing['seconds']:.0f} s in all, of which "
          f"{timing['probe_s']:.0f} s the widget calls (kernel CPU {timing['kernel_cpu_s']:.0f} s, "
          f"{timing['probe_cpu_s']:.0f} s of it in the calls); slowest cell {timing['slowest_cell_s']:.0f} s "
          f"(limit {CELL_LIMIT_S} s); {timing['late']} kernel message(s) received 1 s or more after sent "
          f"(at most {timing['latest_s']:.1f} s)")


def test_a_lost_wake_up_costs_one_slice(monkeypatch):
    """A reply that is in the socket while its poll sleeps on (a lost wake-up: the poll returns it only when its
    timer fires) is found within one slice; a wait with nothing to find still lasts its timeout, then Empty."""
    import asyncio
    monkeypatch.setattr(sys.modules[__name__], "POLL_SLICE_S", 0.05)
    arrived = []

    async def lost_wake_up(timeout=None):          # zmq.asyncio's poll after a lost wake-up: blind until its timer
        await asyncio.sleep(3600 if timeout is None else timeout)
        if arrived:
            return arrived[0]
        raise Empty

    async def reply_later(get, timeout):
        asyncio.get_running_loop().call_later(0.1, arrived.append, {"msg_type": "execute_reply"})
        t0 = time.monotonic()
        msg = await get(timeout=timeout)
        return msg, time.monotonic() - t0

    late = []
    get = _sliced(lost_wake_up, late)
    msg, waited = asyncio.run(reply_later(get, 900))
    assert msg["msg_type"] == "execute_reply" and waited < 1.0, waited
    assert late == []                              # no header date: nothing to measure
    arrived[:] = [{"msg_type": "stream", "header": {"date": datetime.now(timezone.utc) - timedelta(seconds=5)}}]
    assert asyncio.run(get(timeout=1))["msg_type"] == "stream" and len(late) == 1 and 5 <= late[0] < 7, late
    arrived.clear()
    msg, waited = asyncio.run(reply_later(get, None))
    assert msg["msg_type"] == "execute_reply" and waited < 1.0, waited
    arrived.clear()
    t0 = time.monotonic()
    with pytest.raises(Empty):
        asyncio.run(get(timeout=0.3))
    assert 0.3 <= time.monotonic() - t0 < 1.0


def test_a_cell_past_its_limit_fails_naming_it(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "CELL_LIMIT_S", 3)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# A chapter"),
                                         nbformat.v4.new_code_cell("x = 1"),
                                         nbformat.v4.new_code_cell("import time\ntime.sleep(60)")])
    path = tmp_path / "slow.ipynb"
    nbformat.write(nb, path)
    t0 = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match=r"slow\.ipynb: cell 2 \('import time'\) ran past its limit"):
        probe_chapter(path)
    assert time.monotonic() - t0 < 60
