"""The PyTorch domain's `recipes` policy (no LLM): `policy` (the policy, its settings, the
entry the domain offers the policy registry), `catalog` (the recipes and their rendering into
one design), `sdpa` (the attention rewrite). Syntax only: nothing here imports torch.
"""
