"""Owns the LLM side: the roles (Strategist, Analyst, Implementor, Summarizer), their output
schemas and tools, model resolution and pools, and running agents with retries, usage and cost.

The only package that imports pydantic_ai. Submodules: `models` (config -> models, ModelPool),
`calls` (run_agent: the one way an agent is run), `tools` (work directory, scratchpad),
`docs` (documentation search), `strategist`, `analyst`, `implementor`, `summarizer`, and
`offline` (the scripted `test` model).
"""
