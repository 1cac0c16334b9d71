"""The red-team audit, worker side (the `breach_audit` stage): its checks (`audit.py`) and its
timing check (`timing.py`). The run that drives it is `search/policies/redteam/`."""
