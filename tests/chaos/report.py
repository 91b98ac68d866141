"""chaos.json: what each fault cost and broke, written by the chaos suite as a side product.

Each test adds one record per fault (`Waves.run`'s, plus what the fault itself measured: the
decision service's failover, acknowledged messages lost); the session writes them to
bench/results/chaos.json with the machine's load and speed (as the benchmarks do), so a reader
compares time-to-recover across runs. Timings are reported, never asserted; breaches, doubled and
lost writes are asserted to be zero by the tests themselves.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from bench.bench_engine_upgrade import calibration_ns
from bench.report import write_report

_COUNTED = ("limit_breaches", "doubled_writes", "lost_writes", "lost_acked_messages", "bus_stale_objects")


@dataclass
class ChaosReport:
    faults: list[dict[str, Any]] = field(default_factory=list)
    calibration_before: float = field(default_factory=calibration_ns)
    footprint: dict[str, float] = field(default_factory=dict)
    """What the bus held after the cluster's waves, for docs/nats-cluster.md's sizing."""

    def add(self, stack: str, record: dict[str, Any]) -> None:
        self.faults.append({"stack": stack, **record})
        print(f"chaos: {stack}: {record}", flush=True)

    def figures(self) -> dict[str, Any]:
        failovers = [f["failover_s"] for f in self.faults if "failover_s" in f]
        return {
            "faults": self.faults,
            "totals": {
                "faults": len(self.faults),
                **{name: sum(int(f.get(name, 0)) for f in self.faults) for name in _COUNTED},
            },
            "decision_failover_s": max(failovers) if failovers else None,
            "bus_footprint": self.footprint,
            "recover_s_max": max((f["recover_s"] for f in self.faults), default=None),
            "load_average_1m": round(os.getloadavg()[0], 2),
            "calibration_empty_call_ns_before": round(self.calibration_before, 1),
            "calibration_empty_call_ns_after": round(calibration_ns(), 1),
        }

    def write(self) -> None:
        if self.faults:
            write_report(
                "chaos",
                self.figures(),
                floors={
                    "decision_failover_s": "<= 3 after kill -9 of a decision service's leader (issue 19)",
                    "totals": "zero limit breaches, lost or doubled writes, lost acked messages (issue 19)",
                },
            )
