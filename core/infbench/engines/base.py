"""The engine adapter interface (:class:`Engine`) and the engine registry entry
(:class:`EngineSpec`), as adapters and vendor plugins import them. Both are defined in the
bottom layer (:mod:`infbench.data.engine`), so every layer can name them."""

from __future__ import annotations

from infbench.data.engine import DTYPE_ALIASES, Engine, EngineSpec, RunOutput, precision_of

__all__ = ["DTYPE_ALIASES", "Engine", "EngineSpec", "RunOutput", "precision_of"]
