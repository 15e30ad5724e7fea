"""The CLI mode of the held-out validation (issue 34): each fold run the way a user predicts,
through ``infbench import``, ``infbench predict --calibrate --engine E --no-builtin`` and
``infbench predict --json`` on a fresh home holding only the training rows.

The work is :func:`lib_validation.run_cli`; this file names its JSON
(``benchmarks/results/lib_validation_cli.json``) for ``benchmarks/docs_numbers.py`` and runs it:

    python benchmarks/lib_validation_cli.py [--splits random length lomo lodo] [--merge]

(the same as ``python benchmarks/lib_validation.py --cli``).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent


def _lib_validation() -> Any:
    """benchmarks/lib_validation.py as a module (benchmarks/ is not a package)."""
    mod = sys.modules.get("lib_validation")
    if mod is None:
        spec = importlib.util.spec_from_file_location("lib_validation", _HERE / "lib_validation.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules["lib_validation"] = mod
        spec.loader.exec_module(mod)
    return mod


def render(data: dict, variant: str | None = None) -> str:
    """docs/roofline.md's CLI-mode tables (variants cli_summary, cli_folds, cli_folds.SPLIT):
    :func:`lib_validation.render`."""
    return str(_lib_validation().render(data, variant))


if __name__ == "__main__":
    sys.argv.insert(1, "--cli")
    _lib_validation().main()
