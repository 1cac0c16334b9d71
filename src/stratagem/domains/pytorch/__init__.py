"""Owns KernelBench-format problems: loading, static checks, worker stages, tolerances.

Parent-side modules (`problem`, `static`, `domain`) never import torch; worker-side modules
(`runtime`, `compare`, `timing`, `stages`) are imported only inside the evaluation worker.
"""
