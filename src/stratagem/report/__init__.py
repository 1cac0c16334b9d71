"""Presentation: the live view of a run, leaderboards and summaries from the store."""
