"""`bench serve`: a serving benchmark over the OpenAI-compatible API (docs/bench-serve.md)."""
