"""The one error type that reaches a user as a single line (no traceback) with a non-zero exit code."""

from __future__ import annotations


class UserError(Exception):
    """Bad input or an unmet precondition the user can fix: the message names the thing and the problem."""

    exit_code = 2
