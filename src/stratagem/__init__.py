"""stratagem: LLM agents search for faster GPU code; a harness proves every candidate.

Importing this package does no I/O and imports neither torch nor pydantic: the evaluation
worker runs on GPU machines that may have only the standard library, numpy and torch.
"""

__version__ = "0.1.0"
