"""Golden files of infbench's command line: what every command's ``--help`` prints, what
``infbench run --dry-run --json`` plans for every example in the run help and in
docs/guide.md, and the cell ids of the fixture stores (issue 40, item 10).

The goldens pin behaviour across refactors: :mod:`tests.golden.record` writes them and
``tests/integration/test_golden.py`` compares. Both run the command line in this process
(:func:`invoke`, through :func:`infbench.cli.main`, the console script's entry point) on a
**golden host**, so that the files are the same on any machine (a developer's VM, CI's
fresh 2-core VM with another CPU model, a GPU host):

* **the device**: the CPU is a fixed :data:`GOLDEN_CPU` (model, sockets, memory, ISA flags:
  a superset, so that no locally compiled llama.cpp build is refused by the pinned flags),
  the PCI bus is empty, and every plugin that is not built in (the six vendor plugins, any
  other entry point) is disabled through ``INFBENCH_DISABLE_PLUGINS``: a GPU host plans
  exactly what a CPU VM does;
* **container runtimes**: none answers (``DOCKER_HOST`` names a socket that does not exist,
  ``apptainer``/``singularity`` are not found), whether or not the host has Docker and a
  built worker image;
* **Ray**: ``RAY_ADDRESS`` unset and a 1 s connection limit, so the Ray examples end the same
  way without a cluster;
* **paths**: the examples run in a fixed folder (:data:`WORK`, holding the files they name:
  a sweep file, conversations, a trace, a text, and ``model.gguf``, the zoo's tiny model with
  seeded random weights) with ``HOME`` and ``INFBENCH_HOME`` under
  it, so the paths that enter cell ids are the same everywhere; the folder is then written
  ``<WORK>`` in the goldens (the repository ``<REPO>``, Python's prefix ``<PREFIX>``);
* **terminal**: ``COLUMNS=100``, ``TERMINAL_WIDTH=100``, ``NO_COLOR``, ``TERM=dumb``; output is
  captured, never a terminal;
* **versions**: infbench's own version is written ``<VERSION>`` (also in image tags), the
  versions of the engine libraries in the default sweep's candidates ``<LIB>``, and what a
  locally compiled build found on this host's CPU (``CPU features: AVX2``) ``<HOST>``;
* **the network**: why a Ray address did not answer (a refused connection, a timeout, a proxy)
  is written ``<NETWORK>``.

The engines' availability is the project's test install (``scripts/setup.sh``: llama.cpp
compiled in-process, llama.cpp's prebuilt server, transformers, vLLM's CPU build, Ray):
:func:`missing_engines` names what the goldens assume, and the test skips with that list on a
host without it.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.metadata as md
import importlib.util
import io
import json
import os
import re
import shlex
import sqlite3
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent
#: The fixed folder the examples run in (its path enters the cell ids of dataset and trace cells).
WORK = Path("/tmp/infbench-golden/work")
LOCK = Path("/tmp/infbench-golden/lock")
#: Python modules of the engines the goldens assume installed (scripts/setup.sh).
ASSUMED_MODULES = ("llama_cpp", "xllamacpp", "transformers", "torch", "vllm", "ray", "typer")

#: The golden host's CPU (see the module doc).
GOLDEN_CPU: dict[str, Any] = {
    "vendor": "cpu", "kind": "cpu", "model": "Golden CPU @ 2.00GHz", "count": 1, "memory_bytes": 16 * 2**30,
    "driver": "Linux golden",
    "properties": {"arch": "x86_64", "physical_cores": 2, "logical_cpus": 2, "usable_cpus": 2,
                   "isa_flags": sorted({"sse", "sse2", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c",
                                        "bmi2", "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl",
                                        "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8",
                                        "amx_bf16", "neon", "sve"}),
                   "vendor_id": "GoldenVendor", "cpu_family": 6, "cpu_model": 1, "clock_hz": [2000000000, 0],
                   "llc_bytes": 32 * 2**20},
}

#: Files the examples name, written into :data:`WORK` before they run.
FILES = {
    "my-sweep.yaml": "models: [smollm2-135m]\nengines: [llama.cpp-server]\ndtypes: [f16]\nbatch: [1, 2]\n"
                     "input_len: [32]\noutput_len: [8]\n",
    "chats.jsonl": "".join(json.dumps({"messages": [
        {"role": "user", "content": f"Question number {i}: what is {i} plus {i}? Answer with words, please."},
        {"role": "assistant", "content": f"The answer to question {i} is {2 * i}, which is twice {i}. " * 2},
        {"role": "user", "content": f"And what is {i} times three? Say it in one sentence."},
        {"role": "assistant", "content": f"Three times {i} is {3 * i}, a number I computed for you. " * 2}]}) + "\n"
        for i in range(1, 301)),
    "mooncake.jsonl": "".join(json.dumps({"timestamp": 250 * i, "input_length": 64 + 8 * (i % 4),
                                          "output_length": 16 + 4 * (i % 3), "hash_ids": [i % 3]}) + "\n"
                              for i in range(40)),
    "wiki.test.raw": "".join(f" = Section {i} = \n The quick brown fox jumps over the lazy dog {i} times . \n"
                             for i in range(200)),
}


def missing_engines() -> list[str]:
    """The modules of :data:`ASSUMED_MODULES` that are not importable here."""
    return [m for m in ASSUMED_MODULES if importlib.util.find_spec(m) is None]


def golden_env() -> dict[str, str]:
    """The environment of the golden host (see the module doc), from this process's."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("INFBENCH_", "RAY_", "DOCKER_", "CUDA_", "ROCR_", "HIP_", "NVIDIA_"))}
    eps = {ep.name for ep in md.entry_points(group="infbench")}
    path = [p for p in env.get("PATH", "").split(os.pathsep)
            if p and not any((Path(p) / b).exists() for b in ("apptainer", "singularity"))]
    env.update({
        "HOME": str(WORK / "home"), "INFBENCH_HOME": str(WORK / "home" / ".infbench"),
        "INFBENCH_DISABLE_PLUGINS": ",".join(sorted(eps | {"nvidia", "amd", "intel", "habana", "sambanova",
                                                            "cerebras", "testplugin"})),
        "DOCKER_HOST": "unix:///tmp/infbench-golden/no-docker.sock", "INFBENCH_RAY_CONNECT_TIMEOUT": "1",
        "PATH": os.pathsep.join(path), "COLUMNS": "100", "TERMINAL_WIDTH": "100", "NO_COLOR": "1",
        "TERM": "dumb", "_TYPER_FORCE_DISABLE_TERMINAL": "1", "PYTHONHASHSEED": "0",
    })
    return env


@contextlib.contextmanager
def golden_host() -> Iterator[None]:
    """Run inside the golden host: a lock (one golden run at a time on this machine), the
    files in :data:`WORK`, the environment of :func:`golden_env`, the working folder, and the
    detection pinned (:data:`GOLDEN_CPU`, an empty PCI bus)."""
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        import shutil

        shutil.rmtree(WORK, ignore_errors=True)
        (WORK / "home" / ".infbench").mkdir(parents=True)
        for name, text in FILES.items():
            (WORK / name).write_text(text)
        from infbench.data.models import resolve
        from infbench.engines.gguf_dummy import write_dummy_gguf

        write_dummy_gguf(resolve("tiny-random-llama"), "f16", WORK / "model.gguf")
        saved_env, saved_cwd = dict(os.environ), os.getcwd()
        os.environ.clear()
        os.environ.update(golden_env())
        os.chdir(WORK)
        import infbench.detect as detect_mod
        from infbench.contract.manager import get_plugin_manager
        from infbench.data.schema import DeviceInfo
        from infbench.detect.platforms import cpu as cpu_mod

        saved = (detect_mod.scan_pci, cpu_mod.cpu_device)
        detect_mod.scan_pci = lambda root=None: []  # type: ignore[assignment,misc]
        cpu_mod.cpu_device = lambda: DeviceInfo(**GOLDEN_CPU)  # type: ignore[assignment]
        get_plugin_manager.cache_clear()
        try:
            yield
        finally:
            detect_mod.scan_pci, cpu_mod.cpu_device = saved
            get_plugin_manager.cache_clear()
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)
            shutil.rmtree(WORK, ignore_errors=True)


def invoke(argv: list[str]) -> dict[str, Any]:
    """Run ``infbench ARGV`` through the console script's entry point in this process
    (inside :func:`golden_host`), capturing stdout, stderr and the exit status."""
    from infbench.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved = sys.argv, sys.stdin, sys.modules["__main__"]
    # click names the program after sys.argv[0] unless __main__ is a package's module (pytest, -m)
    sys.argv, sys.stdin, sys.modules["__main__"] = ["infbench", *argv], io.StringIO(""), types.ModuleType("__main__")
    code: Any = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv, sys.stdin, sys.modules["__main__"] = saved
    return {"argv": argv, "exit": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


def _version() -> str:
    from infbench.data.version import __version__

    return __version__


#: Versions of libraries and builds in free text (``llama-cpp-python 0.3.16``, ``b6700``).
_LIB_VERSION = re.compile(r"(?<![\w.])v?\d+\.\d+(?:\.\d+)*(?:[.+-][0-9A-Za-z.+-]*)?(?![\w])")
#: What a build found on this host's CPU (``CPU features: AVX2``), and why a Ray address did not
#: answer (the network between here and it).
_HOST_TEXT = [(re.compile(r"CPU features: [^)]*"), "CPU features: <HOST>"),
              (re.compile(r"(cannot connect to the Ray cluster at \S+?): .*"), r"\1: <NETWORK>")]


def normalise(text: str) -> str:
    """Host-dependent parts of printed text replaced by placeholders (see the module doc)."""
    text = text.replace(str(WORK), "<WORK>").replace(str(ROOT), "<REPO>").replace(sys.prefix, "<PREFIX>")
    text = re.sub(rf"\binfbench {re.escape(_version())}\b", "infbench <VERSION>", text)
    text = re.sub(rf"(infbench/[\w.-]+):{re.escape(_version())}\b", r"\1:<VERSION>", text)
    for pattern, repl in _HOST_TEXT:
        text = pattern.sub(repl, text)
    return "\n".join(line.rstrip() for line in text.splitlines()) + ("\n" if text.endswith("\n") else "")


def _normalise_candidate(c: dict[str, Any]) -> dict[str, Any]:
    c = dict(c)
    for k in ("reason", "version", "build", "fix"):
        if isinstance(c.get(k), str):
            c[k] = _LIB_VERSION.sub("<LIB>", normalise(c[k]))
    return c


def normalise_json(doc: Any) -> Any:
    """A ``--json`` document with its host-dependent parts replaced (see the module doc): the
    default sweep's candidates (their library versions and builds), paths, versions."""
    if isinstance(doc, dict):
        out = {k: normalise_json(v) for k, v in doc.items()}
        if isinstance(out.get("default_sweep"), dict):
            d = out["default_sweep"]
            for k in ("candidates", "better_missing"):
                if isinstance(d.get(k), list):
                    d[k] = [_normalise_candidate(c) if isinstance(c, dict) else c for c in d[k]]
            if isinstance(d.get("chosen"), dict):
                d["chosen"] = _normalise_candidate(d["chosen"])
            if isinstance(d.get("why"), str):
                d["why"] = _LIB_VERSION.sub("<LIB>", d["why"])
        return out
    if isinstance(doc, list):
        return [normalise_json(v) for v in doc]
    if isinstance(doc, str):
        return normalise(doc) if "\n" in doc else normalise(doc).rstrip("\n")
    return doc


def normalise_result(res: dict[str, Any]) -> dict[str, Any]:
    """One :func:`invoke` result as it is stored: stdout parsed as JSON when it is JSON, both
    streams normalised; stderr's default-sweep notes with library versions replaced."""
    try:
        stdout: Any = normalise_json(json.loads(res["stdout"])) if res["stdout"].strip() else ""
    except json.JSONDecodeError:
        stdout = normalise(res["stdout"])
    stderr = normalise(res["stderr"])
    stderr = "\n".join(_LIB_VERSION.sub("<LIB>", ln) if ln.startswith(("note:", "warning:")) else ln
                       for ln in stderr.split("\n"))
    return {"argv": res["argv"], "exit": res["exit"], "stdout": stdout, "stderr": stderr}


# -- what is recorded ---------------------------------------------------------------------
def command_paths() -> list[list[str]]:
    """Every command and subcommand of ``infbench`` (``[]`` is the top level), in order."""
    import typer

    from infbench.cli import app

    def walk(cmd: Any, path: list[str]) -> Iterator[list[str]]:
        yield path
        for name, sub in sorted((getattr(cmd, "commands", None) or {}).items()):
            if not getattr(sub, "hidden", False):
                yield from walk(sub, [*path, name])

    return list(walk(typer.main.get_command(app), []))


_EXAMPLE = re.compile(r"^\s*(?:\$\s+)?(infbench run(?:\s.*)?)$")
_INLINE = re.compile(r"`(infbench run(?: [^`]*)?)`")


def _clean(line: str) -> list[str] | None:
    line = line.split("  #", 1)[0].split(" # ", 1)[0].strip()
    if any(ch in line for ch in "[]|<>") or "..." in line:
        return None  # a synopsis (`[--model M]`, `a|b`), not a command
    try:
        return shlex.split(line)[2:]
    except ValueError:
        return None


def run_examples() -> list[list[str]]:
    """The ``infbench run`` examples of ``infbench run --help`` (its source, the help text) and
    docs/guide.md (code blocks and inline code), as argument lists after ``run``, in order,
    without repeats."""
    import typer

    from infbench.cli import app  # noqa: F401 - registers the commands
    from infbench.cli import app as the_app

    run_help = typer.main.get_command(the_app).commands["run"].help or ""  # type: ignore[attr-defined]
    found: list[list[str]] = []
    lines = run_help.splitlines()
    guide = (ROOT / "docs" / "guide.md").read_text().splitlines()
    fenced = False
    for text in lines:
        m = _EXAMPLE.match(text)
        if m and (args := _clean(m.group(1))) is not None:
            found.append(args)
    for text in guide:
        if text.strip().startswith("```"):
            fenced = not fenced
            continue
        m = _EXAMPLE.match(text) if fenced else None
        if m:
            if (args := _clean(m.group(1))) is not None:
                found.append(args)
            continue
        for inline in _INLINE.findall(text):
            if (args := _clean(inline)) is not None:
                found.append(args)
    seen: set[str] = set()
    out = []
    for a in found:
        if (key := " ".join(a)) not in seen:
            seen.add(key)
            out.append(a)
    return out


def dry_run_argv(example: list[str]) -> list[str]:
    """``run EXAMPLE --dry-run --json`` (each flag once)."""
    return ["run", *example, *([] if "--dry-run" in example else ["--dry-run"]),
            *([] if "--json" in example else ["--json"])]


def slug(args: list[str]) -> str:
    """A file name for an argument list: ``run --engine llama.cpp-server`` -> ``run--engine-llama.cpp-server``."""
    s = re.sub(r"[^A-Za-z0-9.,=%-]+", "-", " ".join(args)).strip("-")
    return s[:150] or "infbench"


def store_cell_ids() -> dict[str, Any]:
    """Per fixture store (``tests/fixtures/stores/*.db``, opened and migrated by this infbench
    in a copy): each stored attempt's cell id and spec hash, and the ones this infbench
    computes from the stored spec and device (equal when old stores keep resuming)."""
    import shutil
    import tempfile

    from infbench.data.schema import Cell, DeviceInfo
    from infbench.store import Store

    out: dict[str, Any] = {}
    for db in sorted((ROOT / "tests" / "fixtures" / "stores").glob("*.db")):
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / db.name
            shutil.copy(db, copy)
            Store(copy).close()  # migrate to this infbench's schema
            con = sqlite3.connect(copy)
            rows = con.execute("SELECT cell_id, spec_hash, spec, device, status FROM cells ORDER BY id").fetchall()
            con.close()
        cells = []
        for cell_id, spec_hash, spec, device, status in rows:
            cell, dev = Cell(**json.loads(spec)), DeviceInfo(**json.loads(device))
            cells.append({"status": status, "stored_cell_id": cell_id, "stored_spec_hash": spec_hash,
                          "cell_id": cell.cell_id(dev), "spec_hash": cell.spec_hash()})
        out[db.name] = cells
    return out


def planned_cell_ids(dry_runs: dict[str, Any]) -> list[dict[str, Any]]:
    """Every cell the examples planned (their ``--dry-run --json``): its spec, the device
    signature and the id, each recomputed by this infbench in the test."""
    out = []
    for res in dry_runs.values():
        doc = res["stdout"]
        plans = doc.get("plans", [doc]) if isinstance(doc, dict) else []
        for p in plans:
            for c in p.get("cells", []) if isinstance(p, dict) else []:
                spec = {k: v for k, v in c.items() if k != "cell_id"}
                out.append({"cell": spec, "device": p["device"], "cell_id": c["cell_id"]})
    return out
