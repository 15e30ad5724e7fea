"""Noisy-neighbour arithmetic (infbench.measure.contention) on /proc/stat samples recorded on
this project's 2-core VM (tests/fixtures/contention/recorded.json, written by record.py there:
a busy loop outside the recording process's tree ran through the window; other sessions
shared the machine too), and the suspect reasons it yields."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from infbench.analysis.physics import check_cell
from infbench.measure.contention import (
    CPU_CELL_SHARE,
    ContentionMonitor,
    CpuSample,
    contention_reasons,
    other_cores,
    parse_proc_stat,
)

REC = json.loads((Path(__file__).parents[2] / "fixtures" / "contention" / "recorded.json").read_text())


def test_parse_recorded_proc_stat_by_hand():
    s0, s1 = REC["proc_stat"]
    # cpu  234486 0 10102 69267 2057 0 344 794 0 0: busy = user + nice + system, steal the 8th field
    assert parse_proc_stat(s0) == (234486 + 0 + 10102, 794, 234486 + 10102 + 69267 + 2057 + 344 + 794)
    # per CPU: cpu0 105802 0 4140 ..., cpu1 128683 0 5961 ...
    assert parse_proc_stat(s0, {0}) == (105802 + 4140, 396, 105802 + 4140 + 47208 + 748 + 185 + 396)
    assert parse_proc_stat(s0, {0, 1})[0] == 105802 + 4140 + 128683 + 5961
    assert parse_proc_stat(s1, {1})[0] == 128884 + 5961
    with pytest.raises(ValueError, match="no cpu line"):
        parse_proc_stat(s0, {7})


def test_other_cores_on_the_recorded_window():
    """Both CPUs were busy for the whole 2 s: cpu0 and cpu1 lines 201 ticks each at 100 Hz (the
    aggregate ``cpu`` line says 400: the kernel sums per-CPU counters on its own); the
    recording process used 0.24 s of them; the rest (3.78 core-s over 2.0118 s) was other
    processes: 1.88 cores."""
    s0, s1 = REC["proc_stat"]
    cpus = set(REC["affinity"])
    b0, st0, _ = parse_proc_stat(s0, cpus)
    b1, st1, _ = parse_proc_stat(s1, cpus)
    a = CpuSample(0.0, b0, st0, REC["own_s"][0])
    b = CpuSample(REC["wall_s"], b1, st1, REC["own_s"][1])
    r = other_cores(a, b, REC["hz"])
    assert b1 - b0 == (106002 + 4141 - 105802 - 4140) + (128884 + 5961 - 128683 - 5961) == 402
    assert r["other_cpu_core_s"] == pytest.approx(4.02 - 0.24)
    assert r["other_cpu_cores"] == pytest.approx(3.78 / 2.011811478, rel=1e-6)
    assert r["own_cpu_cores"] == pytest.approx(0.24 / 2.011811478, rel=1e-6)
    assert r["steal_cores"] == 0.0
    reasons = contention_reasons({**r, "cpus": 2}, "cpu")
    assert reasons == ["other processes used 1.88 cores during the cell (more than 0.1 of 2 CPUs: noisy "
                       "neighbours slow the engine down)"]


def test_own_time_above_busy_is_no_negative_neighbour():
    """Tick sampling can credit this tree with more than the CPUs' busy ticks: clamped at 0."""
    r = other_cores(CpuSample(0, 1000, 0, 5.0), CpuSample(1.0, 1100, 0, 6.2), 100)
    assert r["other_cpu_cores"] == 0.0 and r["own_cpu_cores"] == pytest.approx(1.2)
    with pytest.raises(ValueError):
        other_cores(CpuSample(1.0, 0, 0, 0), CpuSample(1.0, 0, 0, 0), 100)


@pytest.mark.parametrize("cores, core_s, kind, flagged", [
    (CPU_CELL_SHARE * 1.5, 0.5, "cpu", True),
    (CPU_CELL_SHARE * 0.5, 0.5, "cpu", False),
    (0.4, 0.02, "cpu", False),          # a 50 ms cell: 2 ticks are noise, not a neighbour
    (0.5, 5.0, "gpu", False),           # an accelerator cell tolerates up to a core of host load
    (1.5, 5.0, "gpu", True),
])
def test_thresholds(cores, core_s, kind, flagged):
    r = contention_reasons({"other_cpu_cores": cores, "other_cpu_core_s": core_s, "cpus": 16}, kind)
    assert bool(r) is flagged


def test_other_processes_on_the_device_flag_the_cell():
    r = contention_reasons({"other_cpu_cores": 0.0, "other_device_pids": [4242, 777]}, "gpu")
    assert r == ["other processes on the device during the cell: 2 (PID 4242, 777)"]
    assert contention_reasons(None) == [] and contention_reasons({}) == []


class Lister:
    """A power sampler that lists the processes on its device (the contract's optional
    ``device_processes``): this process, a PID of this host outside the tree (1: init), and a
    PID from another namespace that no /proc here shows."""

    def __init__(self, pids):
        self.pids, self.calls = pids, 0

    def device_processes(self):
        self.calls += 1
        return self.pids


def test_monitor_sorts_device_pids_into_own_other_and_unseen():
    import os

    lister = Lister([os.getpid(), 1, 2**22 + 17])
    m = ContentionMonitor(lister, interval_s=0.01)
    m.start()
    rec = m.stop()
    assert rec["other_device_pids"] == [1] and rec["unseen_device_pids"] == [2**22 + 17]
    assert lister.calls >= 2 and rec["wall_s"] > 0 and rec["cpus"] >= 1
    assert "1 (PID 1)" in contention_reasons(rec, "gpu")[-1]


def test_monitor_without_a_device_list_and_without_proc(tmp_path):
    m = ContentionMonitor(SimpleNamespace(device_processes=lambda: None), proc_stat=str(tmp_path / "missing"))
    m.start()
    rec = m.stop()
    assert "other_device_pids" not in rec and "other_cpu_cores" not in rec
    assert "CPU contention not measured" in rec["note"] and contention_reasons(rec) == []


def test_physics_check_names_the_neighbours():
    """The contention record in a cell's metrics becomes one of its suspect reasons."""
    from infbench.data.schema import Cell, CellResult, DeviceInfo, RequestRecord

    cell = Cell(model="tiny", engine="llama.cpp", dtype="f16", batch=1, input_len=4, output_len=2)
    dev = DeviceInfo(vendor="cpu", kind="cpu", model="x")
    rec = RequestRecord(t_send_ns=0, t_tokens_ns=[50_000_000, 60_000_000], n_in=4, n_out=2)
    res = CellResult(cell_id="c", spec_hash="s", cell=cell, device=dev, engine={}, status="ok", records=[rec],
                     started_at=0.0, finished_at=1.0,
                     metrics={"contention": {"other_cpu_cores": 1.7, "other_cpu_core_s": 2.0, "cpus": 2}})
    assert check_cell(res, None) == ["other processes used 1.70 cores during the cell (more than 0.1 of 2 CPUs: "
                                     "noisy neighbours slow the engine down)"]


def test_own_tree_counts_a_child_and_agrees_with_psutil():
    """The tree read from /proc (each thread's ``children`` file) holds a child that burned
    about 0.3 s of CPU, and its total agrees with psutil's walk to a few ticks."""
    import os
    import subprocess
    import sys
    import time

    from infbench.measure.contention import _own_tree_psutil, own_tree_cpu_s

    code = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\ntime.sleep(30)"
    p = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            total, pids = own_tree_cpu_s(hz=os.sysconf("SC_CLK_TCK"))
            if p.pid in pids and total >= 0.3:
                break
            time.sleep(0.05)
        assert p.pid in pids and os.getpid() in pids
        ref, ref_pids = _own_tree_psutil(os.getpid())
        assert ref_pids == pids and abs(ref - total) <= 0.05
    finally:
        p.kill()
        p.wait()
