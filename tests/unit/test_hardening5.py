"""Issue 41, the fifth hardening round: every folder infbench writes into is its own, the
journal replays only what infbench wrote for the store, a secret that comes back is
redacted like the one sent, every wait is bounded, each argument is read one way, the
plugin gate checks what it claims, physics holds wherever a number enters the store,
imperfect servers are measured correctly and output is encoded for where it goes.

The CLI runs in-process (:func:`tests.support.hostile.cli` fails on any escaped
exception).
"""

from __future__ import annotations

import json
import os

import pytest

from tests.support.hostile import cli

DRY = ["run", "--model", "tiny", "--dry-run"]


# -- item 1: every folder infbench writes into is its own --------------------------------------
@pytest.mark.parametrize("theirs", ["cells.jsonl", "provenance.json", "notes.txt"])
def test_worker_refuses_a_folder_it_did_not_make(tmp_path, theirs):
    """`worker --out DIR` where DIR holds the user's files: refused (exit 2) before the
    spec is read, naming the folder and a file, and every file left byte for byte."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / theirs).write_text("the user's own data\n")
    r = cli("worker", "--spec", tmp_path / "no-spec.json", "--out", out, code=2)
    text = " ".join(r.output.split())
    assert "did not write" in text and theirs in text and "no-spec.json" not in text
    assert (out / theirs).read_text() == "the user's own data\n" and sorted(p.name for p in out.iterdir()) == [theirs]


def test_worker_folder_mark_rules(tmp_path):
    """New, empty (a container's mount point) and marked folders are taken; a marked
    folder is reused by a resumed worker; a forged or broken mark does not count."""
    from infbench.data.outputs import FOLDER_MARK, OutputRefused, check_own_folder, folder_mark, mark_folder

    new, empty, handoff = tmp_path / "new", tmp_path / "empty", tmp_path / "handoff"
    empty.mkdir()
    (handoff / "taken").mkdir(parents=True)
    (handoff / "taken" / "ab12").write_text("handed")
    for d in (new, empty, handoff):
        check_own_folder(d, "--out", "x")
        mark_folder(d, "infbench worker")
        assert folder_mark(d)["what"] == "infbench worker"
    (new / "cells.jsonl").write_text("{}\n")  # its own earlier output: reused
    check_own_folder(new, "--out", "x")
    forged = tmp_path / "forged"
    forged.mkdir()
    (forged / FOLDER_MARK).write_text('{"written_by": "someone else"}')
    (forged / "cells.jsonl").write_text("theirs")
    with pytest.raises(OutputRefused, match="did not write"):
        check_own_folder(forged, "--out", "x")
    (forged / FOLDER_MARK).unlink()
    (forged / FOLDER_MARK).mkdir()  # a folder where the mark belongs is no mark
    with pytest.raises(OutputRefused):
        check_own_folder(forged, "--out", "x")
    odd = tmp_path / "odd"
    (odd / "taken").mkdir(parents=True)
    (odd / "taken" / "not-a-hash.txt").write_text("x")
    with pytest.raises(OutputRefused):
        check_own_folder(odd, "--out", "x")


def test_journal_entries_are_signed_and_a_forged_file_is_refused_by_name(tmp_path):
    """A file dropped into the journal folder (TTFT -5 s, 1e15 tok/s, claiming this store)
    is not replayed: the next start names it and leaves it; infbench's own journal, signed
    with this home's key, still replays; an entry edited by hand is refused whole."""
    from infbench.data.events import Collector
    from infbench.data.run import RunSummary
    from infbench.execution.bookkeeping import record
    from infbench.store import Store, journal
    from infbench.store.recovery import prepare
    from tests.support.hostile import cell_result

    path = tmp_path / "s.db"
    s = Store(path)
    key = str(path.resolve())
    d = journal.journal_dir()
    d.mkdir(parents=True)
    forged = cell_result(1)
    forged.records[0].t_tokens_ns[:] = [forged.records[0].t_send_ns - 5_000_000_000] * 3
    lines = [{"kind": "run", "store": key, "run_id": "f" * 32, "provenance": {}, "command": "", "started_at": 1.0},
             {"kind": "cell", "store": key, "run_id": "f" * 32, "cell": forged.model_dump(mode="json"),
              "error": "x"}]
    (d / "dropped.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    rec = prepare(s)
    assert rec.replayed_cells == 0 and any("dropped.jsonl" in n and "not written by infbench" in n
                                           for n in rec.notes), rec.notes
    assert (d / "dropped.jsonl").is_file() and not Store(path, readonly=True).results()
    # infbench's own journal (a store that refused the write) is signed and replays
    run = s.begin_run({"host": "h"}, command="infbench run")

    class Full(Store):
        def save_cell(self, run_id, r):
            import sqlite3

            raise sqlite3.OperationalError("database or disk is full")

    full = Full(path)
    full.run_meta[run] = {"provenance": {}, "command": "infbench run", "started_at": 1.0}
    record(full, run, RunSummary(run), cell_result(2), Collector())
    mine = journal.release(full, run)
    entries = [json.loads(x) for x in mine.read_text().splitlines()]
    assert all(isinstance(e.get("mac"), str) and len(e["mac"]) == 64 for e in entries)
    edited = tmp_path / "edited.jsonl"
    entries[1]["cell"]["metrics"]["output_tok_s"] = 1e15
    edited.write_text("".join(json.dumps(e) + "\n" for e in entries))
    rec = prepare(Store(path))
    assert rec.replayed_cells == 1 and rec.journal_files == 1  # its own journal, then deleted
    (d / "edited.jsonl").write_bytes(edited.read_bytes())
    refused: list = []
    assert journal.replay(Store(path), refused)["cells"] == 0
    assert {n for n, _ in refused} == {"dropped.jsonl", "edited.jsonl"}
    assert any("signature does not match" in why for n, why in refused if n == "edited.jsonl")


def test_a_replayed_cell_is_held_to_physics(tmp_path):
    """A signed journal entry whose cell breaks a device-free floor is stored suspect, not ok."""
    from infbench.store import Store, journal

    path = tmp_path / "s.db"
    s = Store(path)
    run = s.begin_run({"host": "h"}, command="infbench run")
    s.run_meta[run] = {"provenance": {}, "command": "", "started_at": 1.0}
    bad = cell_result_fast()
    journal.keep(s, run, bad, "database or disk is full")
    journal.release(s, run)
    assert journal.replay(s)["cells"] == 1
    [row] = Store(path, readonly=True).results()
    assert "faster than any hardware" in (row["metrics"].get("suspect") or "")


def cell_result_fast():
    """A sound-looking cell whose three tokens arrive 1, 2 and 3 ns after the send."""
    from infbench.data.schema import Cell, CellResult, RequestRecord
    from infbench.measure.derive import cell_metrics
    from tests.support.hostile import DEV

    c = Cell(model="tiny-random-llama", engine="llama.cpp", dtype="f16", batch=1, input_len=8, output_len=3)
    recs = [RequestRecord(t_send_ns=1000, t_tokens_ns=[1001, 1002, 1003], n_in=8, n_out=3)]
    return CellResult(cell_id=c.cell_id(DEV), spec_hash=c.spec_hash(), cell=c, device=DEV, status="ok",
                      metrics=cell_metrics(recs), records=recs, engine={"name": "llama.cpp"}, started_at=1.0,
                      finished_at=2.0)


# -- item 2: a value that comes back is redacted like the value sent ----------------------------
def test_every_secret_a_run_holds_is_redacted_wherever_it_comes_back(monkeypatch):
    """Header values, credential-like extra_body values, the --api-key-env key and URL user
    info join the redaction set when the options are checked; an echo of any of them, in
    any surrounding text, is redacted by the one redaction (terminal, store, JSON, CSV)."""
    from infbench.data.engine_options import OpenAIOptions
    from infbench.data.outputs import csv_cell, json_text, terminal_text
    from infbench.data.secrets import redact

    monkeypatch.setenv("MY_KEY", "k3y-Fr0mTheEnv-77")
    OpenAIOptions(extra_headers='{"Authorization": "Bearer abcDEF123456789", "X-Team": "t34m-s3cret",'
                                ' "Accept": "application/json", "X-Source": "infbench"}',
                  extra_body='{"top_k": 5, "credentials": {"pass": "pa55-w0rd-x"}, "note": "sk-live-abcdefghij12"}',
                  api_key_env="MY_KEY", base_url="http://alice:hunter2xyz@host:8000/v1")
    echoed = ("401: invalid token abcDEF123456789; team t34m-s3cret; pass pa55-w0rd-x; key k3y-Fr0mTheEnv-77; "
              "user alice hunter2xyz; note sk-live-abcdefghij12")
    for out in (redact(echoed), terminal_text(echoed), csv_cell(echoed), json_text({"error": echoed})):
        for secret in ("abcDEF123456789", "t34m-s3cret", "pa55-w0rd-x", "k3y-Fr0mTheEnv-77", "hunter2xyz",
                       "abcdefghij12"):
            assert secret not in out, (secret, out)
    # plain header values and ordinary words are not secrets: nothing else is blanked
    assert "application/json" in redact("sent application/json") and redact("see infbench results") == \
        "see infbench results"


def test_a_worker_event_line_is_redacted():
    from infbench.data.events import CellFinished
    from infbench.data.secrets import remember
    from infbench.execution.worker import event_line
    from tests.support.hostile import cell_result

    remember("Bearer zzTOKENzz998877")
    r = cell_result(1, status="failed", error="HTTP 401: bad credential zzTOKENzz998877")
    line = event_line(CellFinished(r))
    assert "zzTOKENzz998877" not in line and "[redacted]" in line


# -- item 3: every wait has a bound and says what it waits for ------------------------------------
class _Hung:
    @staticmethod
    def infbench_detect():
        import time

        time.sleep(30)
        return []


def _plugin(**hooks):
    """A plugin object whose hooks are the given functions (marked @hookimpl)."""
    from infbench.plugin import hookimpl

    ns = {name: staticmethod(hookimpl(fn)) for name, fn in hooks.items()}
    return type("P", (), ns)()


def test_a_hung_hook_is_named_and_the_command_goes_on(monkeypatch):
    """A plugin whose detect never returns: detection ends after the limit, names the plugin
    and the hook, finds the other devices, and does not call the hung plugin again."""
    import time

    from infbench.contract.manager import build_plugin_manager
    from infbench.detect import detect

    monkeypatch.setenv("INFBENCH_PLUGIN_TIMEOUT_S", "0.3")
    pm = build_plugin_manager()
    calls = []

    def slow():
        calls.append(1)
        time.sleep(30)
        return []

    pm.register(_plugin(infbench_detect=slow), name="hangco")
    det = detect(pm)
    assert any(p == "hangco" and "infbench_detect did not return within 0.3 s" in e for p, e in det.errors)
    assert any(d.vendor == "cpu" for d in det.devices)
    det2 = detect(pm)
    assert len(calls) == 1 and any(p == "hangco" for p, _ in det2.errors)


def test_a_hook_that_exits_or_prints_is_caught(monkeypatch, capsys):
    """sys.exit, os._exit and print inside a hook: each is that plugin's error or its
    captured output (cleaned, redacted), never the end of infbench or raw terminal bytes."""
    import os
    import sys

    from infbench.contract.manager import build_plugin_manager
    from infbench.detect import detect

    def exits():
        sys.exit(0)

    def hard_exits():
        os._exit(0)

    def prints():
        print("\x1b]0;pwned\x07\x1b[2Jhello TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789")
        return []

    def dicts():
        return [{"vendor": "acme", "model": "X"}]

    def impossible():
        from infbench.plugin import DeviceInfo

        return [DeviceInfo(vendor="acme", kind="gpu", model="A", count=10**12, memory_bytes=-1)]

    pm = build_plugin_manager()
    for name, fn in (("exitco", exits), ("hardexitco", hard_exits), ("printco", prints), ("dictco", dicts),
                     ("bigco", impossible)):
        pm.register(_plugin(infbench_detect=fn), name=name)
    det = detect(pm)
    errs = dict(det.errors)
    assert "sys.exit(0)" in errs["exitco"] and "os._exit(0)" in errs["hardexitco"]
    assert "DeviceInfo" in errs["dictco"] and "impossible" in errs["bigco"]
    said = capsys.readouterr()
    assert "\x1b" not in said.out + said.err and "hf_abcdefghijklmnopqrstuvwxyz0123456789" not in said.err
    assert "hello" in pm.log.output[("printco", "infbench_detect")]
    assert os._exit.__module__ == "posix" or os._exit.__name__ == "_exit"  # restored after the calls


def test_plugins_check_exercises_stand_ins_and_fails_what_it_should(monkeypatch):
    """On a host without its hardware, the per-device hooks are still called, on a stand-in
    device per catalog entry; negative watts there fail the gate; exits, prints and
    impossible devices fail with the reason; the findings say what was exercised on what."""
    from infbench.plugin import DeviceSpec, PowerReading, PowerSampler, hookimpl, now_ns
    from infbench.testing.conformance import check_conformance

    class Negative(PowerSampler):
        name = "acme-smi"

        def read(self):
            return [PowerReading(t_ns=now_ns(), device_index=0, power_w=-5.0)]

    class NoHardware:
        @hookimpl
        def infbench_detect(self):
            return []

        @hookimpl
        def infbench_device_catalog(self):
            return [DeviceSpec(id="acme-x1", name="Acme X1", vendor="acme", memory_gib=64, bandwidth_tb_s=2.0,
                               sources=["datasheet"])]

        @hookimpl
        def infbench_power_sampler(self, device):
            return Negative() if device.vendor == "acme" else None

    found = check_conformance(NoHardware(), sample_s=0.01, name="acme")
    bad = {f.hook: f.message for f in found if not f.ok}
    assert "power_w=-5.0" in bad["infbench_power_sampler"] and "(stand-in)" in bad["infbench_power_sampler"]
    [ex] = [f for f in found if f.hook == "exercised"]
    assert "power_sampler on Acme X1 x1 (stand-in)" in ex.message

    monkeypatch.setenv("INFBENCH_PLUGIN_TIMEOUT_S", "0.3")
    import os
    import sys

    from infbench.plugin import DeviceInfo

    cases = {
        "exit": (lambda: sys.exit(0), "sys.exit(0)"),
        "hard exit": (lambda: os._exit(0), "os._exit(0)"),
        "hang": (_Hung.infbench_detect, "did not return within 0.3 s"),
        "print": (lambda: print("\x1b[2Jhi") or [], "printed to the terminal"),
        "impossible": (lambda: [DeviceInfo(vendor="a", kind="gpu", model="A", count=10**12, memory_bytes=-1)],
                       "impossible device"),
    }
    for what, (fn, says) in cases.items():
        found = check_conformance(_plugin(infbench_detect=fn), sample_s=0.01, name="x")
        msgs = " ".join(f.message for f in found if not f.ok)
        assert says in msgs, (what, msgs)


def test_plugins_new_refuses_the_names_infbench_ships(tmp_path):
    for name in ("nvidia", "core", "cpu", "engines", "amd"):
        r = cli("plugins", "new", name, "--out", tmp_path)
        assert "a plugin infbench ships" in r.output and not (tmp_path / f"infbench-{name}").exists()


def test_a_plugin_named_like_another_is_not_loaded_and_is_reported(monkeypatch):
    """Two entry points of one name (a `plugins new nvidia` package beside the bundled one,
    or one named `core`): the second is not loaded, keeps the first one's row, and is listed
    as shadowing it."""
    import importlib.metadata as md

    from infbench.contract import manager

    class EP:
        def __init__(self, name, value, dist):
            self.name, self.value = name, value
            self.dist = type("D", (), {"name": dist, "version": "0.1"})()

        def load(self):
            return _plugin(infbench_detect=lambda: [])

    eps = [EP("core", "evil.hooks", "infbench-core"), EP("acme", "acme.hooks", "infbench-acme"),
           EP("acme", "acme2.hooks", "infbench-acme2")]
    monkeypatch.setattr(md, "entry_points", lambda group: eps)
    pm = manager.build_plugin_manager()
    assert pm.infos["core"].module == manager.CORE_DEFAULTS  # the core's row is the core's
    shadow = pm.infos["core (infbench-core)"]
    assert shadow.shadows == "core" and "shadow" in shadow.error
    assert pm.infos["acme (infbench-acme2)"].shadows == "acme"
    assert pm.get_plugin("acme") is not None


def test_a_sweep_above_the_cell_cap_is_refused_before_planning(monkeypatch):
    """5,000 x 200 lengths: refused at once with the count, the cap and how to raise it."""
    from infbench.data.errors import ConfigError
    from infbench.data.schema import Sweep
    from infbench.plan import check_cell_count, planned_cell_count

    sw = Sweep(models=["tiny"], engines=["llama.cpp"], dtypes=["f16"], batch=[1], input_len=list(range(1, 5001)),
               output_len=list(range(1, 201)))
    assert planned_cell_count(sw) == 1_000_000
    with pytest.raises(ConfigError, match="1,000,000 cells.*cap of 50,000") as e:
        check_cell_count(sw)
    assert "INFBENCH_MAX_CELLS" in e.value.hint
    monkeypatch.setenv("INFBENCH_MAX_CELLS", "2000000")
    assert check_cell_count(sw) == 1_000_000


def test_planning_a_large_sweep_shows_progress(pm, cpu):
    from infbench.data.schema import Sweep
    from infbench.plan import plan

    sw = Sweep(models=["tiny-random-llama"], engines=["llama.cpp"], dtypes=["f16"], batch=[1, 2],
               input_len=list(range(1, 101)), output_len=list(range(1, 101)))
    lines: list[str] = []
    p = plan(sw, cpu, pm, progress=lines.append)
    assert len(p.cells) == 20_000
    assert lines[0] == "planning 20,000 cells" and "10,000 of at most 20,000" in lines[1]


def test_an_import_is_all_or_nothing(tmp_path):
    """A failure part-way through an import commits no cell; the run is marked failed."""
    from infbench.store import Store
    from infbench.store.published import import_published
    from tests.support.hostile import cell_result

    class Breaks(Store):
        n = 0

        def save_cell(self, run_id, r):
            Breaks.n += 1
            if Breaks.n == 3:
                raise KeyboardInterrupt
            return super().save_cell(run_id, r)

    s = Breaks(tmp_path / "s.db")
    with pytest.raises(KeyboardInterrupt):
        import_published(s, [cell_result(b) for b in range(1, 6)], {"name": "x"})
    r = Store(tmp_path / "s.db", readonly=True)
    assert r.results() == [] and r.runs()[0]["status"] == "interrupted"


def test_a_stream_past_max_tokens_is_cut(tmp_path):
    """A server that streams without end for an 8-token request: the client stops reading
    after the bound and says why, long before any request timeout."""
    import asyncio

    from infbench.measure.client import HttpClient, stream_event_limit

    async def serve(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        ev = b'data: {"choices": [{"text": " tok"}]}\n\n'
        try:
            for _ in range(100_000):
                writer.write(b"%x\r\n%s\r\n" % (len(ev), ev))
                await writer.drain()
        except (ConnectionError, OSError):
            pass

    async def main():
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = HttpClient(f"http://127.0.0.1:{port}/v1")
        req = client.request_bytes("POST", client.target("completions"), b"{}")
        resp = await asyncio.wait_for(client.send(req, stream_event_limit(8)), 60)
        await client.close()
        server.close()
        return resp

    resp = asyncio.run(main())
    assert resp.error is not None and resp.error.startswith("cut:") and "48 events" in resp.error
    assert 48 < resp.body().count(b"data:") < 200


def test_extra_tokens_are_not_counted_and_flag_the_cell():
    """24 tokens streamed for max_tokens 8 (no usage): the record keeps 8, says 16 extra,
    and the physics check flags the cell."""
    from infbench.analysis.physics import token_reasons
    from infbench.data.schema import Cell
    from infbench.engines.openai import ParsedStream, to_record

    p = ParsedStream(token_times_ns=[1_000_000 * (i + 1) for i in range(24)], done=True)
    rec = to_record(p, 0, 0, 16, None, max_tokens=8)
    assert rec.n_out == 8 and len(rec.t_tokens_ns) == 8 and rec.n_out_extra == 16 and rec.error is None
    cell = Cell(model="m", engine="openai", dtype="auto", batch=1, input_len=16, output_len=8)
    assert any("too many tokens" in r for r in token_reasons(cell, [rec]))


def test_input_tokens_are_estimated_without_usage():
    from infbench.engines.openai import prompt_length_estimate

    assert prompt_length_estimate({"prompt": "a b c d e f g h"}) == 8
    assert prompt_length_estimate({"prompt": [1, 2, 3]}) == 3
    assert prompt_length_estimate({"messages": [{"role": "user", "content": "one two three"}]}) == 3
    assert prompt_length_estimate({"prompt": ""}) is None


def test_a_worker_spec_is_checked_against_its_hash_and_bounds(tmp_path):
    """A spec edited to output_len 10000000 is refused before anything runs: its cells no
    longer hash to what was written; one without a hash is refused too; a cell beyond the
    bounds is named."""
    from infbench.data.errors import ConfigError
    from infbench.data.groups import Group, Plan
    from infbench.data.models import resolve
    from infbench.data.schema import Cell
    from infbench.data.worker_spec import read_spec, write_spec
    from tests.support.hostile import DEV

    c = Cell(model="tiny-random-llama", engine="llama.cpp", dtype="f16", batch=1, input_len=8, output_len=4)
    g = Group(resolve("tiny-random-llama"), "llama.cpp", "f16", 1)
    g.cells.append(c)
    path = tmp_path / "spec.json"
    spec = write_spec(Plan(device=DEV, groups=[g]), path)
    assert read_spec(path).workload_hash == spec.spec_hash()
    raw = json.loads(path.read_text())
    raw["cells"][0]["output_len"] = 10_000_000
    path.write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match="edited after it was written"):
        read_spec(path)
    del raw["workload_hash"]
    path.write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match="no workload_hash"):
        read_spec(path)
    raw["cells"][0]["batch"] = 2_000_000
    from infbench.data.worker_spec import WorkerSpec

    raw["workload_hash"] = WorkerSpec(**raw).spec_hash()
    path.write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match="batch 2,000,000 is above the bound"):
        read_spec(path)


def test_the_engine_child_ends_quietly_when_its_parent_closes_during_its_start(tmp_path):
    """The measuring process stopped while the engine process started: the child sees its
    connection close and exits 0 without a traceback."""
    import socket
    import subprocess
    import sys

    from infbench.engines.process import _BOOT

    parent, child = socket.socketpair()
    p = subprocess.Popen([sys.executable, "-c", _BOOT, str(child.fileno()), str(os.getpid())],
                         pass_fds=(child.fileno(),), stderr=subprocess.PIPE)
    child.close()
    parent.close()
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0 and b"Traceback" not in err, err


# -- item 4: one reading of each argument --------------------------------------------------------
@pytest.mark.parametrize("items, says", [
    (["n_ubatch=4", "n_ubatch=8"], "given twice"),
    (["n-ubatch=4", "n_ubatch=8"], "one key"),
])
def test_duplicate_engine_args_are_an_error(items, says):
    from infbench.data.engine_options import parse_engine_args
    from infbench.data.errors import ConfigError

    with pytest.raises(ConfigError, match=says):
        parse_engine_args(items)


def test_engine_arg_values_are_json_or_text_never_yaml11():
    from infbench.data.engine_options import parse_engine_args

    got = parse_engine_args(["a=010", "b=1:30", "c=yes", "d=0.5", "e=true", "f=null", "g=NaN", "h=08", "i=10"])
    assert got == {"a": "010", "b": "1:30", "c": "yes", "d": 0.5, "e": True, "f": None, "g": "NaN", "h": "08",
                   "i": 10}


@pytest.mark.parametrize("flags, arg", [
    (["--threads", "2"], "n_threads=1"),
    (["--endpoint", "completions", "--engine", "openai", "--base-url", "http://127.0.0.1:9/v1"], "endpoint=chat"),
    (["--base-url", "http://127.0.0.1:9/v1", "--engine", "openai"], "base_url=http://127.0.0.1:8/v1"),
])
def test_a_flag_and_an_engine_arg_that_disagree_stop_the_run(flags, arg):
    r = cli(*DRY, *flags, "--engine-arg", arg)
    assert "set the same option to two values" in " ".join(r.output.split())


def test_an_engine_arg_value_in_the_same_spelling_as_its_flag_is_fine():
    cli(*DRY, "--threads", "2", "--engine-arg", "n_threads=2", code=0)


def test_nested_extra_body_is_refused_not_a_recursion_error():
    deep = "{\"a\":" * 10_000 + "1" + "}" * 10_000
    r = cli(*DRY, "--engine", "openai", "--base-url", "http://127.0.0.1:9/v1", "--engine-arg", f"extra_body={deep}")
    assert "nesting deeper than 32" in " ".join(r.output.split())


def test_internal_errors_of_the_probe_are_clear_errors():
    assert "model" in cli(*DRY, "--model", "x" * 300).output
    r = cli(*DRY, "--engine", "openai", "--base-url", "http://127.0.0.1:9/v1", "--trace-speed", "nan")
    assert "finite" in r.output or "trace" in r.output


# -- item 6: physics on ingest, and predict refuses what run refuses ------------------------------
def test_perplexity_below_one_is_a_failed_measurement():
    from infbench.data.scores import PerplexityResult

    for ppl in (0.5, -3.5):
        r = PerplexityResult(model="m", engine="e", dtype="f16", text_path="t.txt", text_sha256="t",
                             weights_sha256="w", n_ctx=64, status="ok", perplexity=ppl)
        assert r.status == "failed" and "at least 1" in r.error


def test_an_ingested_cell_faster_than_any_hardware_is_stored_suspect(tmp_path):
    from infbench.execution.worker import ingest
    from infbench.store import Store
    from tests.support.hostile import worker_folder

    out = worker_folder(tmp_path / "w", cells=[cell_result_fast()])
    s = Store(tmp_path / "s.db")
    res = ingest(out, s)
    assert res["ok"] == 1
    [row] = Store(tmp_path / "s.db", readonly=True).results()
    assert "faster than any hardware" in row["metrics"]["suspect"]


def test_predict_refuses_what_run_refuses():
    r = cli("predict", "--model", "smollm2-135m", "--device", "cpu", "--input", "20000", "--output", "128")
    assert "exceeds the model's context of 8,192" in " ".join(r.output.split())
    r = cli("predict", "--model", "smollm2-135m", "--device", "cpu", "--engine", "vllm", "--engine-arg",
            "max_num_batched_tokens=-1")
    assert "max_num_batched_tokens" in r.output


# -- item 8: output encoding -------------------------------------------------------------------
def test_figures_escape_data_strings_and_keep_their_templates():
    from infbench.data.outputs import plotly_text

    fig = {"data": [{"name": '<a href="https://evil.example/phish">CLICK ME</a>', "x": ["<b>m</b>"],
                     "hovertemplate": "%{x}<br>%{y}<extra></extra>"}], "layout": {"title": {"text": "a & b"}}}
    out = plotly_text(fig)
    assert out["data"][0]["name"] == '&lt;a href="https://evil.example/phish"&gt;CLICK ME&lt;/a&gt;'
    assert out["data"][0]["x"] == ["&lt;b&gt;m&lt;/b&gt;"] and out["layout"]["title"]["text"] == "a &amp; b"
    assert out["data"][0]["hovertemplate"] == "%{x}<br>%{y}<extra></extra>"


def test_the_terminal_and_csv_lose_bidi_controls():
    from infbench.data.outputs import csv_cell, terminal_text

    name = "model\u202eexe.txt\u2066x\u2069"
    assert terminal_text(name) == "modelexe.txtx" and csv_cell(name) == "modelexe.txtx"


def test_log_axes_label_whole_values():
    from infbench.data.outputs import log_ticks

    t = log_ticks([3, 40])
    assert t["tickvals"] == [2, 5, 10, 20, 50, 100] and t["ticktext"] == ["2", "5", "10", "20", "50", "100"]
    wide = log_ticks([0.01, 500])
    assert wide["tickvals"] == [0.01, 0.1, 1, 10, 100, 1000] and wide["ticktext"][0] == "0.01"


_STUCK = r"""
import os, signal, sys, threading, time
from infbench.data import signals

def ready():  # says "stuck" once the main thread sits inside the call below, not before
    main = threading.main_thread().ident
    while sys._current_frames()[main].f_lineno != LINE:
        time.sleep(0.01)
    print("stuck", flush=True)

with signals.terminate_as_interrupt(), signals.native_call_watchdog(grace_s=0.5), \
        signals.on_hard_exit(lambda: print("hook ran", flush=True)):
    # SIGTERM held back in this thread and the main thread inside one C call that a signal does not
    # interrupt: its Python handler cannot run, as in a native call that does not return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    LINE = sys._getframe().f_lineno + 2
    threading.Thread(target=ready, daemon=True).start()
    time.sleep(60)
print("returned", flush=True)
"""


def test_sigterm_ends_a_run_stuck_in_a_native_call(tmp_path):
    """--no-engine-process: SIGTERM while the main thread sits in a call that does not
    return ends the process after the grace (exit 143), the on-exit hook having run, and
    says why; it does not wait for the call."""
    import signal
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", _STUCK], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert p.stdout.readline().strip() == "stuck"
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 143 and "hook ran" in out and "returned" not in out, (p.returncode, out, err[-2000:])
    assert "SIGTERM arrived while the engine was inside a native call" in err


def test_the_watchdog_does_not_cut_a_run_that_handles_its_signal():
    """A main thread that runs Python after SIGTERM (the normal path) is not cut short."""
    import signal
    import time

    from infbench.data import signals

    with signals.terminate_as_interrupt(), signals.native_call_watchdog(grace_s=0.2):
        with pytest.raises(signals.Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        time.sleep(0.5)  # the cleanup after the signal takes longer than the grace: still alive
    assert signal.getsignal(signal.SIGTERM) is not None


def test_a_new_engine_after_a_killed_engine_process(monkeypatch, tmp_path):
    """A cell past --cell-timeout whose engine process had to be killed: the next cell gets
    a new engine process (announced as loading again) and is measured, not stored failed
    without running."""
    from infbench import hookimpl, testing
    from infbench.data.events import Collector, GroupLoading
    from infbench.data.groups import Plan
    from infbench.data.run import RunOptions
    from infbench.engines import process as P
    from infbench.execution.executors.inprocess import InProcessExecutor
    from infbench.store import Store
    from tests.unit.engines.test_engine_process import CPU, cell, group

    monkeypatch.setattr(P, "KILL_GRACE_S", 0.3)

    class Launch:
        @hookimpl(tryfirst=True)
        def infbench_launch_engine(self, engine, device, options):
            return HangsOnBatchOne(device, options) if engine == "fake" else None

    pm = testing.plugin_manager()
    pm.register(Launch(), name="hang-once")
    ev = Collector()
    plan = Plan(CPU, [group(cell(1, 4), cell(2, 4))])
    s = InProcessExecutor(pm, {"host": "test"}).run(plan, Store(tmp_path / "r.db"), RunOptions(cell_timeout_s=0.5),
                                                    ev)
    assert [r.cell.batch for r in s.failed] == [1] and [r.cell.batch for r in s.ok] == [2]
    assert len(ev.of(GroupLoading)) == 2


from infbench.testing import FakeEngine  # noqa: E402 - the engine below must be importable by its own process


class HangsOnBatchOne(FakeEngine):
    """An isolated stand-in engine whose batch-1 cell never returns (a hung native call)."""

    isolate = True

    def run(self, cell, prompts, deadline_ns=None):
        if cell.batch == 1:
            import time

            time.sleep(600)
        return super().run(cell, prompts, deadline_ns)


def test_adaptive_on_a_remote_endpoint_is_refused_before_a_run_begins(tmp_path):
    from infbench.store import Store

    store = tmp_path / "s.db"
    r = cli("run", "--engine", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--concurrency",
            "1,2,4", "--adaptive", "50%", "--store", store)
    assert "--adaptive predicts from the device's limits" in " ".join(r.output.split())
    assert not store.exists() or Store(store, readonly=True).runs() == []


@pytest.mark.parametrize("value, says", [("010", "YAML 1.1 reading as a number (8)"), ("1:30", "(90)"),
                                         ("yes", "boolean only in YAML 1.1")])
def test_sweep_files_have_one_reading_too(tmp_path, value, says):
    """A sweep file's ``n_ubatch: 010`` was 8 and ``1:30`` 90 (YAML 1.1): refused with the line."""
    f = tmp_path / "s.yaml"
    f.write_text(f"models: [tiny]\nbatch: [1]\nengine_args:\n  n_ubatch: {value}\n")
    r = cli("run", "--sweep", f, "--dry-run")
    assert says in " ".join(r.output.split()) and "line 4" in " ".join(r.output.split())
