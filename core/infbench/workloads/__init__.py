"""Prompt sources. Batch mode uses synthetic prompts of exact token counts."""
