"""Owns KernelBench-format problems: loading, static checks, worker stages, tolerances.

Parent-side modules (`problem`, `domain`, the static checks in `static/`) never import torch;
worker-side modules (`worker/`, and `build/`'s `load_inline` wrapper) are imported only inside
the evaluation worker.
"""
