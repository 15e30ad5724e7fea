"""Write the golden files of the command line (see :mod:`tests.golden.harness`).

Run from the repository root after an intended change of behaviour, and review the diff::

    PYTHONPATH=$PWD/core python -m tests.golden.record

It writes, under ``tests/golden/``:

* ``help/<command>.txt``: ``infbench [COMMAND...] --help`` of every command and subcommand;
* ``dry_run/<example>.json``: ``infbench run EXAMPLE --dry-run --json`` of every example in
  ``infbench run --help`` and docs/guide.md (argv, exit status, stdout parsed, stderr);
* ``store_cell_ids.json``: the cell ids stored in the fixture stores and those computed now;
* ``index.json``: the commands and examples recorded (the test checks nothing was added
  without being recorded).

``tests/integration/test_golden.py`` compares the command line with them.
"""

from __future__ import annotations

import json
import shutil
import sys

from tests.golden import harness as h


def record() -> dict[str, int]:
    """Write every golden file (the old ones removed first); returns how many of each."""
    for sub in ("help", "dry_run"):
        shutil.rmtree(h.GOLDEN / sub, ignore_errors=True)
        (h.GOLDEN / sub).mkdir(parents=True)
    with h.golden_host():
        commands = h.command_paths()
        examples = h.run_examples()
        for path in commands:
            res = h.normalise_result(h.invoke([*path, "--help"]))
            name = h.slug(["infbench", *path]) + ".txt"
            (h.GOLDEN / "help" / name).write_text(f"$ infbench {' '.join([*path, '--help'])}\n"
                                                   f"exit {res['exit']}\n{res['stdout']}"
                                                   + (f"--- stderr\n{res['stderr']}" if res["stderr"] else ""))
            print(f"help {' '.join(path) or '(top)'}: exit {res['exit']}", file=sys.stderr)
        for ex in examples:
            argv = h.dry_run_argv(ex)
            res = h.normalise_result(h.invoke(argv))
            (h.GOLDEN / "dry_run" / (h.slug(argv) + ".json")).write_text(json.dumps(res, indent=1) + "\n")
            print(f"{' '.join(argv)}: exit {res['exit']}", file=sys.stderr)
    ids = h.store_cell_ids()
    (h.GOLDEN / "store_cell_ids.json").write_text(json.dumps(ids, indent=1) + "\n")
    (h.GOLDEN / "index.json").write_text(json.dumps({"commands": commands, "examples": examples}, indent=1) + "\n")
    return {"help": len(commands), "dry_run": len(examples), "stores": len(ids)}


if __name__ == "__main__":
    print(record(), file=sys.stderr)
