"""The PyTorch domain's worker side: the modules that import torch and run inside the
sandboxed worker and judge processes (`evaluation/worker.py`, `evaluation/judge.py`). The
parent never imports them; the parent-side checks and plan live one folder up."""
