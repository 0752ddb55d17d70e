"""Guard a rollout: ``compare`` two configurations before it, ``monitor`` a live server after.

- ``baseline``: the envelope a pick was tuned to (``Envelope``), read from a study or a result.
- ``compare``: A and B run in interleaved pairs until every guarded metric is decided;
  ``verdict``: each metric's paired interval and verdict, α spent over the looks; ``metrics``:
  what is compared, which way is better, guarded metrics and tolerances; ``requests``: one
  run's requests as arrays (the bootstrap within a run); ``files``: two saved results;
  ``summary``: the table's cells and the Markdown summary.
"""
