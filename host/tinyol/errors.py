"""User-facing errors: one clear line, non-zero exit (see cli.main)."""


class TinyolError(Exception):
    """An error caused by the user's input or environment, not by a bug.

    The CLI prints ``error: <message>`` (plus ``hint`` when given) and exits
    with ``exit_code``; the traceback is shown only with ``-v``.
    """

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint
