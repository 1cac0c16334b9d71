"""The PyTorch domain's `load_inline` build machinery: the shared build cache, the header diet,
the split build (standard library only), and the worker's wrapper of
`load_inline` with the build-root claim (`inline_builds.py`, `builds.py`: worker-side only, torch)."""
