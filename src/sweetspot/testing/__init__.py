"""Tools for tests and demos: a mock OpenAI-compatible server, tiny dummy-weight models,
the CPU build of vLLM in a cached environment, a Prometheus server (Debian's binary)."""
