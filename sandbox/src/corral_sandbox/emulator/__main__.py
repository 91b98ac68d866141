"""`python -m corral_sandbox.emulator`: the emulator in its own process (benchmarks, `make run`).

Prints `READY <url>` on stdout once serving and writes the kubeconfig (atomically) if asked, so a
parent can wait for either. Stops cleanly on SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

from corral_sandbox.emulator.app import Emulator


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m corral_sandbox.emulator", description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--kubeconfig", help="write a kubeconfig for the emulator here")
    p.add_argument("--history-size", type=int, default=10_000, help="watch history kept per resource type")
    p.add_argument("--crd-dir", help="CRD manifests to install (default: deploy/crds)")
    p.add_argument("--bookmark-interval", type=float, default=1.0, help="seconds between watch bookmarks")
    p.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="end when the parent process dies (Linux), so a crashed benchmark leaves no server behind",
    )
    p.add_argument(
        "--no-uvloop",
        dest="uvloop",
        action="store_false",
        help="use the standard asyncio loop instead of uvloop",
    )
    return p.parse_args(argv)


async def _serve(args: argparse.Namespace) -> None:
    emulator = Emulator(
        history_size=args.history_size, crd_dir=args.crd_dir, bookmark_interval_s=args.bookmark_interval
    )
    url = await emulator.start(args.host, args.port)
    if args.kubeconfig:
        emulator.write_kubeconfig(args.kubeconfig)
    print(f"READY {url}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await emulator.stop()


def _exit_with_parent() -> None:
    """Ask Linux to send SIGTERM when the parent dies (prctl PR_SET_PDEATHSIG); elsewhere, do nothing."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM))


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    if args.exit_with_parent:
        _exit_with_parent()
    with contextlib.suppress(KeyboardInterrupt):
        if args.uvloop:
            import uvloop

            uvloop.run(_serve(args))
        else:
            asyncio.run(_serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
