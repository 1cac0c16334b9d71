"""Search policies: `recipes` (no LLM) and `auto` (AUTO's Strategist, Analyst and Implementors)."""
