"""The PyTorch domain's static analysis, parent side: the named checks over a candidate's
source (`checks.py`) and what they read it with (syntax only: nothing is imported or run),
the C++/CUDA lexer (`cuda_text.py`) among them, which the split build reads sources with too."""
