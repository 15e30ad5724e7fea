"""Run inside the optimum-habana venv (scripts/engine_venvs.sh): checks what the optimum-habana
adapter uses against the installed package and prints the answers as JSON on stdout.

Importing ``optimum.habana`` runs ``check_synapse_version()``, which shells out to ``pip list |
grep habana-torch-plugin`` (Gaudi's PyTorch bridge, not on PyPI) and fails without it; this
script answers that one command with the version the package declares validated, and nothing
else. ``optimum.habana.transformers.modeling_utils`` imports the bridge itself, so
``adapt_transformers_to_gaudi`` is checked in the installed source (``ast``) rather than imported.

Input (stdin, JSON): ``{"settings": GaudiGenerationConfig attributes, "flags": generate keyword
flags, "model_type": zoo model type}``.
Output: ``{"version", "unknown_settings" (not attributes of GaudiGenerationConfig),
"generate_named" (flags that are named parameters of GaudiGenerationMixin.generate; binding
the call raises otherwise), "ignore_eos_read" (generate reads ignore_eos from its kwargs),
"adapt_params", "optimized" (model_is_optimized for the model type)}``.
"""

import ast
import importlib.metadata as md
import importlib.util
import inspect
import json
import subprocess
import sys
from pathlib import Path

spec = json.load(sys.stdin)
_run = subprocess.run


def _answer(cmd, *a, **k):
    if isinstance(cmd, str) and "habana-torch-plugin" in cmd:
        from optimum.habana.utils.misc import CURRENTLY_VALIDATED_SYNAPSE_VERSION as v  # noqa: N811

        return subprocess.CompletedProcess(cmd, 0, stdout=f"habana-torch-plugin {v}\n", stderr="")
    return _run(cmd, *a, **k)


subprocess.run = _answer
import optimum.habana  # noqa: E402,F401

subprocess.run = _run
import transformers  # noqa: E402
from optimum.habana.checkpoint_utils import model_is_optimized  # noqa: E402
from optimum.habana.transformers.generation import GaudiGenerationConfig  # noqa: E402
from optimum.habana.transformers.generation import utils as gen_utils  # noqa: E402

fresh = GaudiGenerationConfig.from_dict({"bos_token_id": 1, "eos_token_id": 2})
unknown = [k for k in spec["settings"] if not hasattr(fresh, k)]
for k, v in spec["settings"].items():
    setattr(fresh, k, v)
sig = inspect.signature(gen_utils.GaudiGenerationMixin.generate)
sig.bind(object(), input_ids=None, attention_mask=None, generation_config=fresh, streamer=None, **spec["flags"])
named = [k for k in spec["flags"] if k in sig.parameters]
root = Path(importlib.util.find_spec("optimum.habana").origin).parent
tree = ast.parse((root / "transformers" / "modeling_utils.py").read_text())
adapt = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "adapt_transformers_to_gaudi"]
config = transformers.AutoConfig.for_model(spec["model_type"])
print(json.dumps({
    "version": md.version("optimum-habana"),
    "unknown_settings": unknown,
    "generate_named": named,
    "ignore_eos_read": 'kwargs.get("ignore_eos"' in inspect.getsource(gen_utils),
    "adapt_params": [a.arg for a in adapt[0].args.args] if adapt else None,
    "optimized": bool(model_is_optimized(config)),
}))
