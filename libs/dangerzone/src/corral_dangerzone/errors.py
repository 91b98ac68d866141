"""The one exception a refused danger-zone value raises, carrying Longhorn's message verbatim.

Callers (the setting-sync decider explaining why it cannot apply a value, the sandbox's admission
webhook) show the message to operators who know Longhorn's wording, so it must match Longhorn's
text, including how Longhorn wraps one error inside another (`outer: inner`).
"""

from __future__ import annotations


class SettingValueError(ValueError):
    """A setting value Longhorn would refuse; `str(err)` is Longhorn's message."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def wrap(self, context: str) -> SettingValueError:
        """Go's `errors.Wrapf(err, context)`: the same kind of error, `context: message`."""
        return type(self)(f"{context}: {self.message}")


class SettingNotSupportedError(SettingValueError):
    """The setting name is unknown ("setting X is not supported").

    A separate type because Longhorn's webhook lets a "not supported" error through while a
    SystemRestore is in progress (§3.2), so callers must be able to tell it apart.
    """
