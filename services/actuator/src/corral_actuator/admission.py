"""Before a command's content is looked at: was it made at a believable time, by the current leader?

Two things about a command lie outside what it asks for, and outside its id (service, target,
intent, preconditions), so they are checked first and a refusal is not remembered against the id:
the same decision arriving later, properly made, is judged afresh.

* **When it was made.** Expiry (expiry.py) refuses a command older than the maximum age, but can
  only measure a command that says when it was made: one with `createdAt` 0 has no age, and one
  dated in the future looks young for as long as its date is ahead. Either would slip an old
  decision past the age limit, so both are refused. A command dated no further ahead than the
  clock-skew allowance is let through: that much is clocks disagreeing. Since the allowance also
  bounds how far an accepted issuer's clock can be ahead, `max_command_age_s +
  max_clock_skew_s` is the longest a command can have existed when it is applied.
* **Who made it (fencing).** Each decider leads through a lease and stamps its commands with its
  lease term. A leader that lost its lease without noticing (paused, partitioned) may still publish;
  its commands carry an older term than its successor's. The actuator remembers the newest term it
  has seen per service and refuses older ones. Term 0 means "unfenced" (a producer without a
  lease): refused only where the service's policy says `fenced: true`. A term is learned only from
  a command that was applied (the actuator calls `learn` once the write is done), and a term newer
  than any learnt must not be beyond the revision the service's lease key has reached (terms.py):
  a forged command with a huge term, for an object that does not exist or one the policy refuses,
  cannot lock the real leader out.

The newest terms live in process memory only. A restarted (or newly leading) actuator learns them
again from the first (allowed) command each service sends: until the new leader's first command arrives, a
stale leader's command can still pass, exactly as it could before any command was seen. The window
is the restart, and the preconditions every command carries still refuse a decision the cluster has
moved past.
"""

from __future__ import annotations

DEFAULT_MAX_CLOCK_SKEW = 10.0


def timing_refusal(created_at: float, now: float, max_clock_skew: float) -> str | None:
    """Why a command made at `created_at` (the issuer's clock) is refused at `now`, or None."""
    if created_at <= 0:
        return "createdAt is 0: a command that does not say when it was made cannot be checked for age"
    ahead = created_at - now
    if ahead > max_clock_skew:
        return (
            f"createdAt is {ahead:.1f} s in the future, beyond the clock-skew allowance of"
            f" {max_clock_skew:g} s"
        )
    return None


class TermFence:
    """The newest lease term seen per service; refuses commands from older terms."""

    def __init__(self) -> None:
        self._newest: dict[str, int] = {}

    def newest(self, service: str) -> int:
        return self._newest.get(service, 0)

    def refusal(self, service: str, term: int, *, fenced: bool) -> str | None:
        """Why a command from `service` at `term` is refused, or None."""
        if term <= 0:
            if fenced:
                return f"no leader term: the policy fences {service}, whose commands must carry one"
            return None
        newest = self._newest.get(service, 0)
        if term < newest:
            return f"stale leader term {term} < {newest}"
        return None

    def learn(self, service: str, term: int) -> None:
        """`term` is in use by `service` (a command of it was allowed): older ones are stale now."""
        if term > self._newest.get(service, 0):
            self._newest[service] = term
