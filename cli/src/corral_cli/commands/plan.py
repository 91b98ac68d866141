"""`corral plan <service> --snapshot FILE`: what a decision service would do on a given cluster.

Every decision service has a pure core; `plan` feeds it a snapshot (a Kubernetes `List` in JSON or
YAML, e.g. `kubectl get volumes,replicas,engineimages,nodes,settings -n longhorn-system -o json`, or
a Longhorn support bundle: corral_cli.snapshots) and prints the commands it would emit, one JSON
object per line, so an operator can ask "what would happen on my cluster?" and tests can check a
core on recorded clusters.

An object that does not decode is named on stderr with the decoder's message and left out, as the
watcher leaves it out of the bus (the service sees it as UNREADABLE), and the plan goes on; with
`--strict` such a snapshot is refused instead (exit 2).

Every installed decision service (the decision kit's `corral.deciders` entry points) is a
sub-command; its own `Decider` makes the plan (`corral_decision.plan`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

import msgspec

from corral_cli.snapshots import read_snapshot
from corral_decision import decision_service, decision_services
from corral_decision.plan import plan_snapshot
from corral_model.envelopes import Command
from corral_model.snapshot import read_items


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("plan", help="commands a decision service would emit on a snapshot")
    services = parser.add_subparsers(dest="service", required=True, metavar="SERVICE")
    for name in sorted(decision_services()):
        sub = services.add_parser(name, help=f"plan of the {name} service")
        sub.add_argument(
            "--snapshot",
            required=True,
            help="Kubernetes List (JSON or YAML; '-' reads stdin), or a support bundle (zip or folder)",
        )
        sub.add_argument("--now", type=parse_now, default=None, help="decision time (epoch s or ISO-8601)")
        sub.add_argument("--explain", action="store_true", help="also print why each object was not chosen")
        sub.add_argument(
            "--strict", action="store_true", help="refuse a snapshot holding an object that does not decode"
        )
        sub.set_defaults(func=_run)


def parse_now(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not epoch seconds nor ISO-8601: {text!r}") from e
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def command_line(command: Command) -> dict[str, Any]:
    line = {
        "service": command.service,
        "verb": str(command.verb),
        "kind": command.target.kind,
        "namespace": command.target.namespace,
        "name": command.target.name,
        "changes": [{"path": c.path, "value": c.value} for c in command.changes],
        "preconditions": [{"path": p.path, "value": p.value} for p in command.preconditions],
        "id": command.id,
        "reason": command.reason,
    }
    if command.related:  # (only when there are some: older plans read as before)
        line["related"] = msgspec.to_builtins(command.related)
    return line


def undecodable(document: Mapping[str, Any]) -> list[str]:
    """One line per object of a modelled kind that does not decode (raises SnapshotError, a
    ValueError, for a document that cannot be read at all)."""
    return [bad.describe() for bad in read_items(document).undecodable]


def _run(args: argparse.Namespace) -> int:
    try:
        document = read_snapshot(args.snapshot)
        problems = undecodable(document)
        for problem in problems:
            what = "refused" if args.strict else "left out"
            print(f"corral plan {args.service}: {what}: {problem}", file=sys.stderr)
        if problems and args.strict:
            print(
                f"corral plan {args.service}: {len(problems)} object(s) do not decode (--strict)",
                file=sys.stderr,
            )
            return 2
        service = decision_service(args.service)
        commands, explanations = plan_snapshot(
            service, document, args.now if args.now is not None else time.time()
        )
    except (OSError, ValueError, LookupError) as e:
        print(f"corral plan {args.service}: {e}", file=sys.stderr)
        return 2
    out = sys.stdout
    try:
        for command in commands:
            out.write(json.dumps(command_line(command), sort_keys=True) + "\n")
        if args.explain:
            for explanation in explanations:
                line = {"explain": True, **msgspec.to_builtins(explanation)}
                out.write(json.dumps(line, sort_keys=True) + "\n")
        out.flush()
    except BrokenPipeError:
        # The reader went away (`| head`): not an error. Point stdout at devnull so the
        # interpreter's final flush does not complain again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
