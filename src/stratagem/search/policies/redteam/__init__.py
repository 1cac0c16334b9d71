"""The red-team run, parent side (`stratagem redteam`, docs/integrity.md): the attacker's policy
(`policy.py`), its prompts (`prompts.py`), the breach corpus (`corpus.py`) and the run's views
(`views.py`). The audit itself runs in the worker (`domains/pytorch/worker/redteam/`)."""

OUTCOMES = ("caught", "breach", "neutralized", "never_fired", "honest", "broken", "unaudited")
"""Every outcome an attempt can have (`policy.py`'s docstring says each), in the order the views
list them."""
