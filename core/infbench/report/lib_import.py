"""Reading LLM-Inference-Bench's CSV layout into stored cells marked ``published``.

The layout is the one of the paper's raw results (``Plots/All_results.csv`` of
github.com/argonne-lcf/LLM-Inference-Bench: ``Hardware, Num of Hardware, Framework,
Model, Input Output Length, Batch Size, Latency, Throughput``) and the one
``infbench export --format lib-csv`` writes (the same columns plus ``Input Length,
Output Length, TTFT Latency, end_latency, avg_power``; :data:`infbench.report.data.LIB_COLUMNS`).
``Latency`` is the batch's wall time (s), ``Throughput`` ``batch x (input + output) /
Latency`` (their eq. 2).

Mapping (:func:`published_cells`):

* **Devices** by name to the catalog (:data:`LIB_HARDWARE`; any other name through the
  catalog's ``match`` strings). LLM-Inference-Bench counts an MI250 as one device; ROCm
  shows its two GCDs, so N MI250 are imported as ``2 N`` devices with ``tensor_parallel_size
  2 N`` (their scripts: ``CUDA_VISIBLE_DEVICES=0,1`` for one MI250, vLLM ``--tensor-parallel-size``
  4 and 8 for two and four).
* **Frameworks** to infbench's engine names (:data:`LIB_ENGINES`), dtype fp16 in each
  engine's spelling (the paper ran everything in fp16).
* **llama.cpp**: the paper ran ``llama-bench -pg IN,OUT -b BATCH``, one sequence whose
  prompt is processed ``BATCH`` tokens at a time (``-b`` is llama.cpp's ``n_batch``), and
  its rows say so: ``Throughput x Latency = IN + OUT`` rather than ``BATCH x (IN + OUT)``.
  Such a row (and every llama.cpp row of the paper's own hardware names, ``-b 1`` included)
  becomes a batch-1 cell with ``options = {"n_batch": BATCH}`` and, since a
  cell spec cannot hold that option, a ``spec_hash`` of its own (it matches no local cell
  in ``compare``). With several GPUs llama.cpp splits the layers (a pipeline), which the
  prediction's llama.cpp profile knows.
* **Provenance and marking**: each cell's engine description carries ``published: true``,
  the source and the CSV line; its ``cell_id`` hashes the source and the published device
  name too, so a published cell never stands in for a local measurement of the same
  workload (``infbench run`` does not skip a cell because the paper measured it); the
  device's ``properties`` hold ``catalog_id`` and ``published_name``.
"""

from __future__ import annotations

import csv
import io
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infbench.data import metrics as M
from infbench.data.errors import ConfigError
from infbench.data.inputs import integer_text, number_text, read_text
from infbench.data.models import resolve
from infbench.data.outputs import FORMULA_START
from infbench.data.schema import Cell, CellResult, DeviceInfo, short_hash
from infbench.data.secrets import printable
from infbench.detect.devices import catalog

if TYPE_CHECKING:  # pragma: no cover
    from infbench.contract.manager import PluginManager


@dataclass(frozen=True)
class PublishedDevice:
    """How a published hardware name maps to a catalog device.

    Attributes:
        catalog_id: the device description id (``infbench devices``).
        vendor, kind: :class:`DeviceInfo` fields.
        model: the name the driver reports (matched by the catalog's ``match`` strings).
        devices_per_unit: devices the driver shows per published unit (MI250: 2 GCDs).
        note: what is known about the published system.
    """

    catalog_id: str | None
    vendor: str
    kind: str
    model: str
    devices_per_unit: int = 1
    note: str = ""


#: LLM-Inference-Bench's hardware names (and their systems, paper Table II).
LIB_HARDWARE: dict[str, PublishedDevice] = {
    "Nvidia A100 GPU": PublishedDevice("a100-40gb", "nvidia", "gpu", "NVIDIA A100-SXM4-40GB",
                                       note="ALCF Polaris: 4x A100 SXM4 40GB per node"),
    "Nvidia H100 GPU": PublishedDevice("h100-sxm", "nvidia", "gpu", "NVIDIA H100 80GB HBM3"),
    "Nvidia GH200 GPU": PublishedDevice("gh200", "nvidia", "gpu", "NVIDIA GH200 480GB"),
    "AMD MI250 GPU": PublishedDevice("mi250", "amd", "gpu", "AMD Instinct MI250", devices_per_unit=2,
                                     note="each MI250 is two GCDs (devices to ROCm)"),
    "AMD MI300X GPU": PublishedDevice("mi300x", "amd", "gpu", "AMD Instinct MI300X"),
    "Intel PVC GPU": PublishedDevice("max-1550", "intel", "gpu", "Intel(R) Data Center GPU Max 1550",
                                     note="ALCF Aurora/Sunspot, one package (both stacks) per device"),
    "Intel Max 1550": PublishedDevice("max-1550", "intel", "gpu", "Intel(R) Data Center GPU Max 1550"),
    "Habana Gaudi2": PublishedDevice("gaudi2", "habana", "accelerator", "HL-225 (Gaudi2)"),
    "SambaNova SN40L": PublishedDevice("sn40l", "sambanova", "accelerator", "SambaNova SN40L"),
}
#: LLM-Inference-Bench's framework names -> infbench engine names.
LIB_ENGINES = {"vLLM": "vllm", "TensorRT-LLM": "trtllm-serve", "llama.cpp": "llama.cpp",
               "Deepspeed-MII": "deepspeed-mii", "Deepspeed": "deepspeed", "sambaflow": "sambaflow",
               "transformers": "transformers", "OpenAI-compatible": "openai"}
#: fp16 as each engine spells it (the paper ran everything in fp16).
FP16_SPELLING = {"vllm": "float16", "vllm-server": "float16", "trtllm-serve": "float16", "transformers": "float16",
                 "llama.cpp": "f16", "llama.cpp-server": "f16"}
#: The columns a row must have.
REQUIRED = ("Hardware", "Num of Hardware", "Framework", "Model", "Input Output Length", "Batch Size", "Latency")
#: The source recorded when the caller names none.
DEFAULT_SOURCE = {"name": "LLM-Inference-Bench", "url": "https://github.com/argonne-lcf/LLM-Inference-Bench",
                  "citation": "Chitty-Venkata et al., LLM-Inference-Bench, SC24 workshops (arXiv 2411.00136)"}


@dataclass
class LibRow:
    """One parsed row (units: s, tokens, tokens/s, W).

    Attributes:
        line: the row's line number in the file (1 = header).
        hardware, framework, model: as written.
        units: ``Num of Hardware``.
        n_in, n_out, batch: tokens in / out per request, ``Batch Size``.
        latency_s: the batch's wall time.
        throughput_tok_s: total tokens per second, or None.
        ttft_s, e2e_s: mean TTFT and request E2E, or None.
        avg_power_w: mean power (the layout's mW / 1000), or None.
    """

    line: int
    hardware: str
    units: int
    framework: str
    model: str
    n_in: int
    n_out: int
    batch: int
    latency_s: float
    throughput_tok_s: float | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    avg_power_w: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


#: Largest CSV imported (the paper's All_results.csv is ~1 MB).
MAX_IMPORT_BYTES = 256 << 20
#: Physical bounds of a published row: units of hardware, tokens, seconds, tokens/s, mW.
MAX_UNITS = 4096
MAX_TOKENS = 10_000_000
MAX_BATCH = 1_000_000
MAX_SECONDS = 1e7
MAX_TOK_S = 1e9
MAX_POWER_MW = 1e10
#: Longest text cell (hardware, framework, model names).
MAX_TEXT = 300
#: Fastest decode a row may claim per sequence (s per token; :data:`infbench.report.imports.common.MIN_TPOT_S`).
MIN_TPOT_S = 1e-5


def _int(v: str, col: str, where: str, hi: int = MAX_TOKENS) -> int:
    return integer_text(v, f"column {col!r}", where, 1, hi)


def _required_float(v: str | None, col: str, where: str) -> float:
    x = _float(v, col, where, required=True)
    assert x is not None  # required: an empty value raised
    return x


def _float(v: str | None, col: str, where: str, required: bool = False, hi: float = MAX_SECONDS) -> float | None:
    if v is None or str(v).strip() in ("", "nan", "NaN", "None"):
        if required:
            raise ConfigError(f"{where}: column {col!r} is empty", hint="every row needs Latency (s)")
        return None
    x = number_text(v, f"column {col!r}", where)
    if x <= 0:
        raise ConfigError(f"{where}: column {col!r} is {v!r}; it must be a positive number",
                          hint="fix or delete that row")
    if x > hi:
        raise ConfigError(f"{where}: column {col!r} is {v!r}; more than {hi:g} is no measurement",
                          hint="fix or delete that row")
    return x


def _text(v: str, col: str, where: str) -> str:
    """A text cell: no control characters, at most :data:`MAX_TEXT` characters, and a
    formula guard written by ``export`` (``'=...``) taken off again."""
    t = printable(v).strip()
    if len(t) > 1 and t[0] == "'" and t[1] in FORMULA_START:
        t = t[1:]
    if not t:
        raise ConfigError(f"{where}: column {col!r} is empty", hint="fix or delete that row")
    if len(t) > MAX_TEXT:
        raise ConfigError(f"{where}: column {col!r} is {len(t)} characters long (at most {MAX_TEXT})",
                          hint="fix or delete that row")
    return t


def read_lib_csv(path: str | Path) -> list[LibRow]:
    """Parse a CSV in LLM-Inference-Bench's layout. Lines starting with ``#`` are
    comments (the fixtures record their source that way).

    The file is read as :mod:`infbench.data.inputs` reads every file: at most
    :data:`MAX_IMPORT_BYTES`, UTF-8 (a Latin-1 file is named with its line), every number
    finite and physically possible (``Num of Hardware`` 1..:data:`MAX_UNITS`, lengths and
    batch whole numbers, times and throughput positive), a row on one line. Each row is
    checked like a measured cell (issue 33, :func:`_consistent`): TTFT at most the E2E (so
    TPOT >= 0) and both at most the batch's Latency, ``Input Output Length`` agreeing with
    ``Input Length``/``Output Length``, and Throughput x Latency = batch x (input + output)
    tokens (or input + output for llama-bench's single sequence) within the rounding of the
    printed numbers. The header names each column once, and a file with no row is refused.

    Raises:
        ConfigError: unreadable or too large file, not UTF-8, a missing column, or a
            malformed row; the message names the file and the line (``results.csv, line 7:
            column 'Batch Size' is 'abc', not a whole number``).
    """
    p = Path(path)
    text = read_text(p, "import file", MAX_IMPORT_BYTES,
                     hint="pass LLM-Inference-Bench's Plots/All_results.csv (UTF-8) or an `infbench export` file")
    # comment lines become blank lines, so every row keeps its line number
    text = "\n".join("" if line.lstrip().startswith("#") else line for line in text.split("\n"))
    reader = csv.reader(io.StringIO(text, newline=""))
    rows = []
    header: list[str] | None = None
    last = 0
    try:
        for values in reader:
            first, last = last + 1, reader.line_num
            if not values or not any(v.strip() for v in values):
                continue
            where = f"{p}, line {first}"
            if last > first:
                raise ConfigError(f"{where}: a quoted field runs over lines {first}-{last}; every row of this "
                                  "layout is one line", hint="fix or delete that row")
            if header is None:
                header = [h.strip() for h in values]
                twice = sorted({h for h in header if header.count(h) > 1})
                if twice:
                    raise ConfigError(f"{where}: the header names {', '.join(map(repr, twice))} more than once; "
                                      "which column holds the value is ambiguous",
                                      hint="keep one column of each name")
                missing = [c for c in REQUIRED if c not in header]
                if missing:
                    raise ConfigError(f"{where}: the header lacks {', '.join(missing)}",
                                      hint=f"LLM-Inference-Bench's layout starts with: {', '.join(REQUIRED)}, "
                                           "Throughput")
                continue
            rows.append(_row(values, header, first, where))
    except csv.Error as exc:
        raise ConfigError(f"{p}, line {reader.line_num}: not a CSV row ({exc})", hint="fix or delete that row") \
            from None
    if header is None:
        raise ConfigError(f"{p} has no header and no rows", hint="expected LLM-Inference-Bench's CSV layout")
    if not rows:
        raise ConfigError(f"{p} has a header but no rows; nothing to import",
                          hint="pass a file with at least one result row")
    return rows


def _row(values: list[str], header: list[str], lineno: int, where: str) -> LibRow:
    if len(values) != len(header):
        raise ConfigError(f"{where}: {len(values)} values for {len(header)} columns",
                          hint="a quoted field or a stray comma; fix or delete that row")
    r = dict(zip(header, (v.strip() for v in values), strict=True))
    io_len = r["Input Output Length"]
    if "/" in io_len:
        a, _, b = io_len.partition("/")
        n_in, n_out = _int(a, "Input Output Length", where), _int(b, "Input Output Length", where)
    else:
        n_in = n_out = _int(io_len, "Input Output Length", where)
    if r.get("Input Length") or r.get("Output Length"):  # the separate columns must tell the same lengths
        sep_in = _int(r["Input Length"], "Input Length", where) if r.get("Input Length") else n_in
        sep_out = _int(r["Output Length"], "Output Length", where) if r.get("Output Length") else n_out
        if (sep_in, sep_out) != (n_in, n_out):
            raise ConfigError(f"{where}: 'Input Output Length' {io_len!r} says {n_in}/{n_out} tokens, but 'Input "
                              f"Length'/'Output Length' say {sep_in}/{sep_out}",
                              hint="the row contradicts itself: fix or delete it")
    texts = {col: _text(r[col], col, where) for col in ("Hardware", "Framework", "Model")}
    power_mw = _float(r.get("avg_power"), "avg_power", where, hi=MAX_POWER_MW)
    row = LibRow(
        line=lineno, hardware=texts["Hardware"], units=_int(r["Num of Hardware"], "Num of Hardware", where, MAX_UNITS),
        framework=texts["Framework"], model=texts["Model"], n_in=n_in, n_out=n_out,
        batch=_int(r["Batch Size"], "Batch Size", where, MAX_BATCH),
        latency_s=_required_float(r["Latency"], "Latency", where),
        throughput_tok_s=_float(r.get("Throughput"), "Throughput", where, hi=MAX_TOK_S),
        ttft_s=_float(r.get("TTFT Latency"), "TTFT Latency", where),
        e2e_s=_float(r.get("end_latency"), "end_latency", where),
        avg_power_w=power_mw / 1e3 if power_mw else None,
        extra={k: printable(v)[:MAX_TEXT] for k, v in r.items() if k not in header[:8] and k not in (
            "Input Length", "Output Length", "TTFT Latency", "end_latency", "avg_power") and v})
    _consistent(row, r, where)
    return row


#: Relative slack of the consistency checks beyond the rounding of the printed values.
CONSISTENCY_SLACK = 0.005


def _rounding(text: str | None, value: float | None) -> float:
    """The relative error of ``value`` as printed in ``text`` (half a unit of its last digit)."""
    if not text or not value:
        return 0.0
    mant = text.strip().lower().split("e")[0]
    decimals = len(mant.split(".", 1)[1]) if "." in mant else 0
    exp = int(text.strip().lower().split("e")[1]) if "e" in text.strip().lower() else 0
    return 0.5 * 10.0 ** (exp - decimals) / abs(value)


def _consistent(row: LibRow, raw: dict[str, str], where: str) -> None:
    """Refuse a row that contradicts itself (a measured cell could not be so): TTFT above
    the request's E2E (a negative TPOT) or above the batch's Latency, E2E above Latency,
    or a Throughput that is not ``batch x (input + output) / Latency`` (LLM-Inference-Bench's
    eq. 2) or, for llama-bench's single sequence, ``(input + output) / Latency``, beyond the
    rounding of the printed numbers.

    Raises:
        ConfigError: naming the line, the values and what they contradict.
    """
    lat = row.latency_s
    tol_lat = _rounding(raw.get("Latency"), lat)
    if row.ttft_s is not None and row.e2e_s is not None:
        slack = 1 + CONSISTENCY_SLACK + _rounding(raw.get("TTFT Latency"), row.ttft_s) + \
            _rounding(raw.get("end_latency"), row.e2e_s)
        if row.ttft_s > row.e2e_s * slack:
            raise ConfigError(f"{where}: 'TTFT Latency' {row.ttft_s:g} s exceeds 'end_latency' {row.e2e_s:g} s: the "
                              "first token cannot come after the last (TPOT would be negative)",
                              hint="the row contradicts itself: fix or delete it")
    for col, v in (("TTFT Latency", row.ttft_s), ("end_latency", row.e2e_s)):
        if v is not None and v > lat * (1 + CONSISTENCY_SLACK + tol_lat + _rounding(raw.get(col), v)):
            raise ConfigError(f"{where}: {col!r} {v:g} s exceeds 'Latency' {lat:g} s, the whole batch's time",
                              hint="the row contradicts itself: fix or delete it")
    # Physics (issue 41): each sequence decodes its n_out tokens one after another, at least
    # MIN_TPOT_S each, so neither the batch's Latency nor a request's E2E can be shorter.
    floor = row.n_out * MIN_TPOT_S
    for col, v in (("Latency", lat), ("end_latency", row.e2e_s)):
        if v is not None and v * (1 + CONSISTENCY_SLACK + _rounding(raw.get(col), v)) < floor:
            raise ConfigError(f"{where}: {col!r} {v:g} s for {row.n_out} output tokens is under "
                              f"{MIN_TPOT_S * 1e6:g} µs per token: no device decodes a sequence that fast",
                              hint="the row contradicts physics: fix or delete it")
    if row.ttft_s is not None and row.e2e_s is not None and row.n_out > 1:
        decode = row.e2e_s - row.ttft_s
        printed = (_rounding(raw.get("TTFT Latency"), row.ttft_s) * row.ttft_s
                   + _rounding(raw.get("end_latency"), row.e2e_s) * row.e2e_s)
        if decode > printed and decode / (row.n_out - 1) < MIN_TPOT_S:
            raise ConfigError(f"{where}: 'end_latency' - 'TTFT Latency' = {decode:g} s for {row.n_out - 1} tokens "
                              f"is a TPOT of {decode / (row.n_out - 1) * 1e9:.3g} ns, under {MIN_TPOT_S * 1e6:g} µs "
                              "per token", hint="the row contradicts physics: fix or delete it")
    if row.throughput_tok_s is not None:
        tol = CONSISTENCY_SLACK + tol_lat + _rounding(raw.get("Throughput"), row.throughput_tok_s)
        tokens = row.throughput_tok_s * lat
        expected = [row.batch * (row.n_in + row.n_out)]  # eq. 2
        if single_sequence_allowed(row):
            expected.append(row.n_in + row.n_out)  # llama-bench -b BATCH: one sequence
        if not any(abs(tokens / e - 1) <= tol for e in expected):
            raise ConfigError(f"{where}: 'Throughput' {row.throughput_tok_s:g} tok/s x 'Latency' {lat:g} s is "
                              f"{tokens:.6g} tokens, but batch {row.batch} x ({row.n_in} + {row.n_out}) tokens is "
                              f"{expected[0]:g}", hint="Throughput is batch x (input + output) / Latency "
                                                       "(LLM-Inference-Bench eq. 2; one sequence's tokens only for "
                                                       "the paper's own llama-bench rows): fix or delete the row")
    else:
        implied = row.batch * (row.n_in + row.n_out) / lat
        if implied > MAX_TOK_S:
            raise ConfigError(f"{where}: no 'Throughput', and batch {row.batch} x ({row.n_in} + {row.n_out}) tokens "
                              f"in 'Latency' {lat:g} s is {implied:.3g} tok/s, more than {MAX_TOK_S:g}",
                              hint="the row contradicts physics: fix or delete it")


def single_sequence_allowed(row: LibRow) -> bool:
    """Whether a row may hold one sequence's tokens although its ``Batch Size`` is above 1:
    only llama.cpp rows of LLM-Inference-Bench's own hardware names, which ran
    ``llama-bench -b BATCH`` (one sequence, BATCH its n_batch: the module doc). Any other
    row's batch is the number of sequences (issue 41: a batch-64 vLLM row holding one
    sequence's tokens is refused)."""
    return row.batch == 1 or (LIB_ENGINES.get(row.framework, row.framework.lower()).startswith("llama.cpp")
                              and row.hardware in LIB_HARDWARE)


def published_device(name: str, units: int, pm: PluginManager | None = None) -> tuple[DeviceInfo, int]:
    """The :class:`DeviceInfo` of a published hardware name for ``units`` of it, and the
    devices per unit. Known names use :data:`LIB_HARDWARE`; other names (e.g. what
    ``export --format lib-csv`` wrote for a local device) are matched against the
    catalog's ``match`` strings of every vendor, else kept as an undescribed device."""
    known = LIB_HARDWARE.get(name)
    if known is None:
        label = name
        if ": " in name and name.split(": ", 1)[0].lower() == "cpu":
            return DeviceInfo(vendor="cpu", kind="cpu", model=name.split(": ", 1)[1], count=units,
                              properties={"published_name": name}), 1
        spec = None
        if pm is not None:
            best = None
            for s in catalog(pm):
                for m in s.match:
                    if m.lower() in label.lower() and (best is None or len(m) > best[0]):
                        best = (len(m), s)
            spec = best[1] if best else None
        if spec is not None:
            known = PublishedDevice(spec.id, spec.vendor, "gpu", name)
        else:
            vendor = (name.split()[0] if name.split() else "unknown").lower().strip(":")
            return DeviceInfo(vendor=vendor, kind="gpu", model=name, count=units,
                              properties={"published_name": name}), 1
    props: dict[str, Any] = {"catalog_id": known.catalog_id, "published_name": name}
    if known.devices_per_unit > 1:
        props["devices_per_unit"] = known.devices_per_unit
    return (DeviceInfo(vendor=known.vendor, kind=known.kind, model=known.model, count=units * known.devices_per_unit,
                       properties=props), known.devices_per_unit)


def _model_name(name: str) -> tuple[str, bool]:
    """The zoo key of a published model name (HF id), and whether the zoo knows it."""
    try:
        return resolve(name).name, True
    except ConfigError:
        return name, False


def published_cells(rows: list[LibRow], source: dict[str, Any] | None = None,
                    pm: PluginManager | None = None) -> tuple[list[CellResult], dict[str, Any]]:
    """Stored-cell results for parsed rows, marked published (see the module doc).

    Args:
        rows: :func:`read_lib_csv` output.
        source: what to record as the source (``name``, ``url``, ``commit``, ``file``...);
            default :data:`DEFAULT_SOURCE`.
        pm: plugin manager, for matching unknown hardware names to the catalog.

    Returns:
        ``(results, summary)``: one ok :class:`CellResult` per row, and ``{"rows",
        "devices": {catalog id or name: rows}, "unmapped_devices": [...],
        "unknown_models": [...], "single_sequence_rows": n}``.
    """
    src = {**DEFAULT_SOURCE, **(source or {})}
    now = time.time()
    out: list[CellResult] = []
    summary: dict[str, Any] = {"rows": len(rows), "devices": {}, "unmapped_devices": [], "unknown_models": [],
                               "single_sequence_rows": 0}
    for r in rows:
        device, per_unit = published_device(r.hardware, r.units, pm)
        engine = LIB_ENGINES.get(r.framework, r.framework.lower())
        dtype = FP16_SPELLING.get(engine, "fp16")
        model, known_model = _model_name(r.model)
        if not known_model and model not in summary["unknown_models"]:
            summary["unknown_models"].append(model)
        seqs, options = r.batch, {}
        if r.throughput_tok_s and engine.startswith("llama.cpp"):
            ratio = r.throughput_tok_s * r.latency_s / (r.n_in + r.n_out)
            # One sequence for BATCH > 1, or any row of the paper itself: llama-bench -b BATCH.
            if abs(ratio - 1.0) < 0.02 and r.hardware in LIB_HARDWARE and single_sequence_allowed(r):
                seqs, options = 1, {"n_batch": r.batch}
                summary["single_sequence_rows"] += 1
        cell = Cell(model=model, engine=engine, dtype=dtype, batch=seqs, input_len=r.n_in, output_len=r.n_out,
                    tensor_parallel_size=r.units * per_unit, warmup=0)
        cid = device.properties.get("catalog_id") or r.hardware
        summary["devices"][cid] = summary["devices"].get(cid, 0) + 1
        if not device.properties.get("catalog_id") and r.hardware not in summary["unmapped_devices"]:
            summary["unmapped_devices"].append(r.hardware)
        mark = {"source": src["name"], "hardware": r.hardware, "framework": r.framework, "options": options}
        spec_hash = cell.spec_hash() if not options else short_hash({**cell.spec(), "engine_options": options})
        total = r.throughput_tok_s or seqs * (r.n_in + r.n_out) / r.latency_s
        out_tps = total * r.n_out / (r.n_in + r.n_out)
        metrics: dict[str, Any] = {
            M.DURATION.key: r.latency_s, M.TOTAL_TOK_S.key: total, M.OUTPUT_TOK_S.key: out_tps,
            M.OUTPUT_TOK_S_PER_DEVICE.key: out_tps / device.count, M.REQUEST_S.key: seqs / r.latency_s,
            "published": True}
        if r.ttft_s:
            metrics[M.TTFT.key] = {"mean": r.ttft_s, "count": seqs}
        if r.e2e_s:
            metrics[M.E2E.key] = {"mean": r.e2e_s, "count": seqs}
            if r.ttft_s and r.n_out > 1:
                # >= 0: read_lib_csv refused TTFT > E2E beyond the printed rounding; within it, 0
                metrics[M.TPOT.key] = {"mean": max(0.0, (r.e2e_s - r.ttft_s) / (r.n_out - 1)), "count": seqs}
        if r.avg_power_w:
            energy = r.avg_power_w * r.latency_s
            metrics[M.AVG_POWER.key] = r.avg_power_w
            metrics[M.ENERGY.key] = energy
            metrics[M.TOKENS_PER_J.key] = seqs * (r.n_in + r.n_out) / energy
        eng = {"name": engine, "published": True, "source": src["name"], "framework": r.framework,
               "line": r.line, "published_model": r.model}
        if options:
            eng["options"] = options
            eng["note"] = (f"llama-bench -b {r.batch}: one sequence, its prompt processed {r.batch} tokens per "
                           "step (n_batch); LLM-Inference-Bench's 'Batch Size'")
        if r.extra:
            eng["extra_columns"] = r.extra
        out.append(CellResult(
            cell_id=short_hash({"spec": cell.spec(), "device": device.signature(), "published": mark}),
            spec_hash=spec_hash, cell=cell, device=device, status="ok", metrics=metrics,
            power_note=None if r.avg_power_w else "published: no power in the source",
            engine=eng, wall_s=r.latency_s, engine_s=r.latency_s, started_at=now, finished_at=now))
    return out, summary


