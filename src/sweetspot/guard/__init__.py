"""Guard a rollout: ``compare`` two configurations before it, ``monitor`` a live server after.

- ``baseline``: the envelope a pick was tuned to (``Envelope``), read from a study or a result.
- ``compare``: A and B run in interleaved pairs until every guarded metric is decided;
  ``verdict``: each metric's paired interval and verdict, α spent over the looks; ``metrics``:
  what is compared, which way is better, guarded metrics and tolerances; ``requests``: one
  run's requests as arrays (the bootstrap within a run); ``files``: two saved results;
  ``summary``: the table's cells and the Markdown summary.
- ``monitor``'s steps: ``scrape`` (a ``/metrics`` GET, the log's new lines) -> ``window`` (two
  scrapes as one window and its state) -> ``checks`` and ``drift`` (alerts against the envelope
  and the tuned traffic; ``lengths`` fits vLLM's length buckets) -> ``monitor`` (the loop, the
  summary) -> ``render`` (JSON lines, table rows).
- ``rules``: Prometheus recording and alerting rules holding a live server to an envelope;
  ``rule_tests``: promtool unit tests for them; ``dashboard``: a Grafana dashboard of the same.
"""
