"""Owns persistence: the SQLite run database and the content-addressed artifact directory."""
