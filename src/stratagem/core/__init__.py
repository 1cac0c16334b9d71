"""Owns the vocabulary every layer shares: problems, designs, objectives, verdicts, the graph.

Standard library only, so the evaluation worker can use it on a bare GPU machine.
"""
