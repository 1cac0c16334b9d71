"""Owns the prompt side of the agents: context curation (P best, Q worst, R recent, F failed,
fitted to a token budget) and rendering prompts from the templates in `prompts/`.

No LLM library is imported here; the `agents` package turns these texts into agent runs.
"""
