"""Step 3 of a run: engine adapters (launch a model, generate, record per-token times).

Each adapter follows :class:`infbench.data.engine.Engine`: ``start(group)`` loads the
model once for a group of cells, ``run(cell, prompts)`` returns one raw record per
request, ``stop()`` frees everything, ``describe()`` gives versions for provenance.
"""
