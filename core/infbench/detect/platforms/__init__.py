"""Built-in platform plugins. Only the CPU lives in the core: every host has one, so
``infbench detect && infbench run`` works with nothing else installed. Accelerators
are vendor plugins (``plugins/<vendor>/``, distributions ``infbench-<vendor>``)."""
