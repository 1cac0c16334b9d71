"""Owns the GPU side: the request/response protocol, the sandbox, executors, the worker."""
