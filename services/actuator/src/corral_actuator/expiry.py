"""Commands too old to apply: the actuator refuses them, unapplied, as `expired`.

A decision service counts a command it issued as in flight until it sees the effect or a result;
with neither for its `command_ttl` (engine-upgrade: 60 s) it presumes the command lost and frees
the slot, which may then go to another command. Were the old command applied after that (it sat in
LH_COMMANDS while the actuator was down, or behind a long backlog), a node could go over its limit.
So the actuator applies a command only while its issuer still counts it:

    max_command_age_s  +  worst clock skew between pods  <  the issuer's command_ttl

Age is the actuator's clock minus `Command.created_at` (the issuer's clock), hence the skew term;
the defaults (30 s against 60 s) leave 30 s for it. The runner refuses first (admission.py) a
command without `created_at` and one dated further in the future than the clock-skew allowance
(10 s), so a command that reaches this rule has an age, and the skew term is at most that
allowance. Here, `created_at` 0 still reads as "no age" (for callers that did not admit it), and
core/v1 Events (the upgrade-path gate's reports) are true however late and counted by nobody:
neither expires.
"""

from __future__ import annotations

from corral_model.envelopes import Command
from corral_model.kinds import KindInfo

DEFAULT_MAX_COMMAND_AGE = 30.0


def overage(command: Command, kind: KindInfo, max_age: float, now: float) -> float | None:
    """The command's age when it is too old to apply (`max_age` 0 or less: never), else None."""
    if max_age <= 0 or command.created_at <= 0:
        return None
    if (kind.group, kind.kind) == ("", "Event"):
        return None
    age = now - command.created_at
    return age if age > max_age else None
