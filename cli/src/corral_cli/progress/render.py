"""Drawing the progress figures: a table redrawn in place on a terminal, lines everywhere else.

* `TerminalView` (stdout is a TTY): the whole table, redrawn in place with plain ANSI escapes
  (cursor up, erase line), so the wave reads like a live dashboard without any dependency;
* `LineView` (a pipe, a log file, a test): one line per owner node whenever that node's figures
  (or the limit) change, and one `total` line when the totals change, so `grep`, a log collector
  or a test can follow the wave line by line.

Both print the same words: `in flight N`, `done N`, `waiting N`, `blocked N (reason n, …)`. A
model that names its groups otherwise (`group_title`, e.g. SETTING) or its targets (`details()`:
im-restart's instance managers, what blocks a setting, which components are left) gets them below
the table, and as lines of their own (each when it first shows or changes) in a LineView.
"""

from __future__ import annotations

from typing import IO, Protocol

from corral_decision.progress import GroupFigures, Progress, details_of

ERASE_LINE = "\x1b[2K"
ERASE_BELOW = "\x1b[J"
BOLD, DIM, RESET = "\x1b[1m", "\x1b[2m", "\x1b[0m"
YELLOW, GREEN = "\x1b[33m", "\x1b[32m"
SLOTS_SHOWN = 8  # wider limits are drawn as a number only
FLIGHT_WIDTH = 18


class ProgressView(Protocol):
    def update(self, model: Progress, elapsed: float) -> None: ...

    def note(self, text: str) -> None:
        """A remark beside the figures (it must not tear a table drawn in place)."""

    def close(self) -> None: ...


def blocked_text(row: GroupFigures) -> str:
    if not row.blocked:
        return "0"
    reasons = ", ".join(f"{reason} {count}" for reason, count in sorted(row.blocked.items()))
    return f"{row.blocked_total} ({reasons})"


def figures_line(row: GroupFigures, limit: int) -> str:
    """`node-1  limit 2  in flight 1  done 5  waiting 2  blocked 1 (degraded 1)`"""
    return (
        f"{row.node:<12} limit {limit}  in flight {row.in_flight}  done {row.done}"
        f"  waiting {row.waiting}  blocked {blocked_text(row)}"
    )


class LineView:
    """One line per changed node, for anything that is not a terminal."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self._heading = ""
        self._shown: dict[str, tuple[object, ...]] = {}
        self._details: set[str] = set()

    def update(self, model: Progress, elapsed: float) -> None:
        lines = []
        title = model.heading()
        if title != self._heading:
            self._heading = title
            lines.append(f"{elapsed:7.1f}s {title}")
        limit = model.limit
        for row in [*model.groups(), model.total()]:
            key = (limit, *row.key())
            if self._shown.get(row.node) != key:
                self._shown[row.node] = key
                lines.append(f"{elapsed:7.1f}s {figures_line(row, limit)}")
        details = details_of(model)
        for line in details:
            if line not in self._details:
                lines.append(f"{elapsed:7.1f}s   {line}")
        self._details = set(details)
        if lines:
            self.out.write("\n".join(lines) + "\n")
            self.out.flush()

    def note(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def close(self) -> None:
        self.out.flush()


class TerminalView:
    """The whole table, redrawn in place; `close` leaves the last frame on the screen."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self._drawn = 0
        self._frame: list[str] = []

    def update(self, model: Progress, elapsed: float) -> None:
        self._draw(self.frame(model, elapsed))

    def note(self, text: str) -> None:
        """Printed where the table was; the table is drawn again below it."""
        self._draw([text], keep=True)
        if self._frame:
            self._draw(self._frame)

    def _draw(self, lines: list[str], keep: bool = False) -> None:
        up = f"\x1b[{self._drawn}F" if self._drawn else ""
        body = "".join(f"{ERASE_LINE}{line}\n" for line in lines)
        self.out.write(f"{up}{body}{ERASE_BELOW}")
        self.out.flush()
        if keep:
            self._drawn = 0  # a note stays on the screen: the next frame goes below it
        else:
            self._frame, self._drawn = lines, len(lines)

    def frame(self, model: Progress, elapsed: float) -> list[str]:
        limit = model.limit
        lines = [f"{BOLD}{model.heading()}{RESET}  {DIM}{elapsed:.0f}s{RESET}"]
        title = str(getattr(model, "group_title", "NODE"))
        lines.append(
            f"{DIM}{title:<14}{'IN FLIGHT':<{FLIGHT_WIDTH}}{'DONE':>6}{'WAITING':>9}  BLOCKED{RESET}"
        )
        for row in model.groups():
            lines.append(self._row(row, limit))
        lines.append(self._row(model.total(), limit, slots=False))
        lines.extend(f"  {line}" for line in details_of(model))
        return lines

    @staticmethod
    def _row(row: GroupFigures, limit: int, slots: bool = True) -> str:
        if slots and 0 < limit <= SLOTS_SHOWN:
            used = min(row.in_flight, limit)
            bar = f"{YELLOW}{'■' * used}{RESET}{DIM}{'□' * (limit - used)}{RESET}"
            count = f"{row.in_flight}/{limit}"
            flight = f"{bar} {count}" + " " * max(0, FLIGHT_WIDTH - limit - 1 - len(count))
        else:
            flight = f"{row.in_flight:<{FLIGHT_WIDTH}}"
        done = f"{GREEN}{row.done:>6}{RESET}" if row.done else f"{row.done:>6}"
        blocked = blocked_text(row) if row.blocked else f"{DIM}0{RESET}"
        return f"{row.node:<14}{flight}{done}{row.waiting:>9}  {blocked}"

    def close(self) -> None:
        self.out.flush()
