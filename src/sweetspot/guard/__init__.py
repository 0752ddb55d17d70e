"""Guard a rollout: ``compare`` two configurations before it, ``monitor`` a live server after.

- ``baseline``: the envelope a pick was tuned to (``Envelope``), read from a study or a result.
"""
