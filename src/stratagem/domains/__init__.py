"""Owns the domain plug-ins: what kind of program is being optimised and how it is checked."""
