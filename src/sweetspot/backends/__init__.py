"""Where trials run: the simulator, a real vLLM server, an existing endpoint. Each produces the
same per-request records (``records.RequestRecord``) for the one metrics function."""
