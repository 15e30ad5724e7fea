"""The bottom layer of infbench: the types every other layer shares, and nothing else.

Nothing here imports from any other infbench package except :mod:`infbench.data.schema` and
:mod:`infbench.data.errors` (both part of this layer). The import-linter contract in
``pyproject.toml`` checks it (docs/architecture.md draws the layers):

* :mod:`.version`     the infbench version and the store schema version;
* :mod:`.paths`       where infbench keeps its files (``$INFBENCH_HOME``);
* :mod:`.engine`      :class:`~.engine.EngineSpec` (an engine in the registry),
  :class:`~.engine.RunOutput`, dtype spellings and :func:`~.engine.precision_of`;
* :mod:`.groups`      :class:`~.groups.Group` and :class:`~.groups.Plan`;
* :mod:`.scenarios`   what a run measures next: the typed scenario specs (sweep, ``--find-max``,
  perplexity) carried from the command line to wherever the engine runs;
* :mod:`.run`         run options and the run summary;
* :mod:`.quality`     a perplexity measurement as stored;
* :mod:`.metrics`     the one table of metric definitions (key, label, unit, direction, scale).

Devices, cells, sweeps, raw records and cell results are in :mod:`infbench.data.schema`
(also this layer).
"""
