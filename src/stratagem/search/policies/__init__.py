"""Search policies: the registry and the generic policies (`auto`, `tune`, `pike-b`, `pike-o`); a domain brings its own (`Domain.policies`)."""
