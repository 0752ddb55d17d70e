"""The one exception type that reaches the user as a one-line message (exit code 2)."""


class SweetspotError(Exception):
    """Bad input or an impossible request, explained in one line.

    The CLI prints ``error: <message>`` and exits with code 2; anything else escaping a command
    is a bug.
    """
