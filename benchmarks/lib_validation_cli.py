"""The CLI mode of ``benchmarks/lib_validation.py`` (``--cli``): its JSON is
``benchmarks/results/lib_validation_cli.json``; this module only renders it for
docs/roofline.md (``<!-- numbers: lib_validation_cli:VARIANT -->``).

    python benchmarks/lib_validation.py --cli      # writes benchmarks/results/lib_validation_cli.json
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lib_validation import render as _render  # noqa: E402 - the script's own renderer


def render(data: dict[str, Any], variant: str | None = None) -> str:
    """:func:`lib_validation.render` of the CLI mode's JSON (default variant ``cli_summary``)."""
    return _render(data, variant or "cli_summary")


if __name__ == "__main__":
    raise SystemExit("run `python benchmarks/lib_validation.py --cli` (this module renders its JSON)")
