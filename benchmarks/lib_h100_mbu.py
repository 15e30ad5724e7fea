"""MBU at batch 1 against LLM-Inference-Bench's published H100 figure (docs/hardware-runs.md).

LLM-Inference-Bench publishes 0.994 s end to end for Llama-3-8B on vLLM on an H100 at batch
1, input = output = 128 tokens. This prints the utilisations that figure implies on the
described H100 (SXM5, 3.35 TB/s: :func:`infbench.analysis.physics.published_utilisation`)
and, given a store with the same cell measured on an NVIDIA GPU, the measured E2E, TPOT and
MBU beside it and their ratio to the published figure:

    infbench run --device nvidia --engine vllm --model llama-3-8b --dtype bf16 \\
        --batch 1 --input-len 128 --output-len 128 --store h100.db
    python benchmarks/lib_h100_mbu.py --store h100.db [--device h100-sxm] [--json]

``--out benchmarks/results/lib_h100_mbu.json`` writes the JSON there (docs/hardware-runs.md
renders from it); ``--what-if-tb-s 2.0,3.9`` adds the same figure on the bandwidths of other
H100 parts (PCIe 2.0 TB/s, NVL 3.9 TB/s).

Without a GPU only the published side is computed (no measured cell is invented).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from infbench.analysis.physics import LIB_H100_LLAMA3_8B, published_utilisation
from infbench.analysis.roofline import Limits
from infbench.contract.manager import get_plugin_manager
from infbench.detect.devices import catalog, find_spec


def main() -> None:
    """Parse the arguments, compute, print (a few lines, or JSON)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="h100-sxm", help="device description id (infbench devices)")
    ap.add_argument("--store", type=Path, help="a store holding the cell measured on an NVIDIA GPU")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    ap.add_argument("--what-if-tb-s", default="", help="comma list of other bandwidths (TB/s) to compute it for")
    a = ap.parse_args()
    pm = get_plugin_manager()
    lim = Limits.from_info(find_spec(catalog(pm), a.device).per_device())
    pub = LIB_H100_LLAMA3_8B
    spec = {k: pub[k] for k in ("model", "dtype", "batch", "input_len", "output_len")}
    out = {"published": {**published_utilisation(spec, pub["e2e_s"], lim), "source": pub["source"]},
           "measured": None, "what_if": []}
    for tb in [float(x) for x in a.what_if_tb_s.split(",") if x.strip()]:
        other = dataclasses.replace(lim, bandwidth_bytes_s=tb * 1e12)
        out["what_if"].append({"bandwidth_tb_s": tb, **published_utilisation(spec, pub["e2e_s"], other)})
    if a.store:
        from infbench.store import Store

        for r in Store(a.store).results():
            s, m = r["spec"], r["metrics"] or {}
            if r["status"] == "ok" and r["device"]["vendor"] == "nvidia" and s["model"] == pub["model"] and \
                    s["engine"] == pub["engine"] and s["batch"] == 1 and s["input_len"] == 128 and \
                    s["output_len"] == 128 and not s.get("load"):
                e2e = m["e2e_s"]["mean"]
                out["measured"] = {"cell_id": r["cell_id"], "device": r["device"]["model"], "e2e_s": e2e,
                                   "ttft_s": m["ttft_s"]["mean"], "tpot_s": m["tpot_s"]["mean"], "mbu": m.get("mbu"),
                                   "mfu": m.get("mfu"), "suspect": m.get("suspect"),
                                   "e2e_vs_published": e2e / pub["e2e_s"],
                                   "device_proof": (r.get("engine") or {}).get("device_proof")}
    out["store"] = str(a.store) if a.store else None
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(out, indent=2) + "\n")
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(lines(out))


def lines(out: dict) -> str:
    """What the script prints: the published figure's implications, then the measured cell."""
    p = out["published"]
    tb = p["bandwidth_bytes_s"] / 1e12
    text = (f"published: {p['source']}: E2E {p['e2e_s']} s;\nfloor on {p['device_id']} ({tb:.2f}"
            f" TB/s) {p['e2e_floor_s']:.3f} s -> E2E utilisation {p['e2e_utilisation']:.3f}; TPOT at most "
            f"{p['tpot_s_at_most'] * 1e3:.2f} ms -> MBU at least {p['mbu_at_least']:.3f}")
    m = out["measured"]
    if m is None:
        text += "\nmeasured: " + ("no such cell in the store" if out.get("store") else "no store given (--store)")
    else:
        text += (f"\nmeasured on {m['device']}: E2E {m['e2e_s']:.3f} s ({m['e2e_vs_published']:.3f}x published), "
                 f"TTFT {m['ttft_s'] * 1e3:.1f} ms, TPOT {m['tpot_s'] * 1e3:.2f} ms, MBU {m['mbu']}, "
                 f"suspect: {m['suspect']}")
    return text


def render(data: dict, variant: str | None = None) -> str:
    """docs/hardware-runs.md's figures from lib_h100_mbu.json (benchmarks/docs_numbers.py): the
    printed lines (default) or the reading (``reading``)."""
    if variant == "reading":
        p = data["published"]
        other = {w["bandwidth_tb_s"]: w["mbu_at_least"] for w in data["what_if"]}
        text = (f"A decode step of Llama-3-8B in bf16 reads {p['decode_bytes_per_step'] / 1e9:.2f} GB (the weights "
                f"without the embedding\ntable, the KV cache and activations); with TTFT at its floor the 127 decode "
                f"steps share the\nrest of the {p['e2e_s']} s, so TPOT is at most {p['tpot_s_at_most'] * 1e3:.2f} ms "
                f"and vLLM reached at least {100 * p['mbu_at_least']:.0f} % of the SXM5's\nbandwidth at batch 1.")
        if other:
            names = {2.0: "H100 PCIe", 3.9: "H100 NVL"}
            text += (" The same figure would mean an MBU of at least "
                     + " and ".join(f"{m:.2f} on {tb:g} TB/s" + (f" ({names[tb]})" if tb in names else "")
                                    for tb, m in other.items()) + ".")
        return text
    cmd = "python benchmarks/lib_h100_mbu.py" + (f" --store {data['store']}" if data.get("store") else "")
    return "\n".join(["```", f"$ {cmd}", lines(data), "```"])


if __name__ == "__main__":
    main()
