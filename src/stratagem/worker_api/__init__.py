"""Owns what both sides of an evaluation import: the parent-worker request/response contract
(`protocol`) and the device lock (`device_lock`). It sits below `domains/` and
`evaluation/`: a domain builds requests and its worker takes the lock without importing the
evaluation service that imports the domains.
"""
