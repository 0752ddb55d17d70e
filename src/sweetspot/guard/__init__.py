"""Guard a rollout: ``compare`` two configurations before it, ``monitor`` a live server after.

- ``baseline``: the envelope a pick was tuned to (``Envelope``), read from a study or a result.
- ``rules``: Prometheus recording and alerting rules holding a live server to an envelope;
  ``rule_tests``: promtool unit tests for them; ``dashboard``: a Grafana dashboard of the same.
"""
