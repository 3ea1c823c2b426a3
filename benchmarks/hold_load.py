"""Hold this machine's load near a target while something else runs beside it.

    python benchmarks/hold_load.py 10 --log load.log &     # until the stop file exists
    ... run the test suite ...
    touch load.log.stop

Busy loops (ordinary priority) fill whatever the processes beside them leave: every few seconds
the number of runnable tasks is read from /proc/loadavg (the median of ten reads over a second),
and loops are started or ended so that they and the other runnable tasks add up to the target.
Every minute the log gets one line: the time, /proc/loadavg as it stands, the loops running.
BENCHMARKS.md quotes the 1-minute load average from that log. Linux only.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from pathlib import Path

LOADAVG = Path("/proc/loadavg")
MAX_LOOPS = 16


def runnable_now() -> int:
    """The median of ten reads, over a second, of the runnable tasks in /proc/loadavg."""
    reads = []
    for _ in range(10):
        reads.append(int(LOADAVG.read_text().split()[3].split("/")[0]))
        time.sleep(0.1)
    return sorted(reads)[len(reads) // 2]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("target", type=float, help="runnable tasks to hold, e.g. 10")
    p.add_argument("--log", type=Path, default=Path("load.log"))
    p.add_argument("--every", type=float, default=4.0, help="seconds between adjustments")
    args = p.parse_args()
    stop = args.log.with_name(args.log.name + ".stop")
    loops: list[subprocess.Popen] = []
    last_line = 0.0
    # the loops never outlive this script, however it ends: Ctrl-C, a kill (SIGTERM), or the
    # stop file
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        with args.log.open("a", buffering=1) as log:
            while not stop.exists():
                others = runnable_now() - len(loops) - 1  # the loops, and this reader itself
                want = max(0, min(MAX_LOOPS, round(args.target - max(0, others))))
                while len(loops) < want:
                    loops.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
                while len(loops) > want:
                    loops.pop().kill()
                if time.time() - last_line >= 60:
                    last_line = time.time()
                    stamp = time.strftime("%H:%M:%S")
                    log.write(f"{stamp} {LOADAVG.read_text().strip()} loops={len(loops)}\n")
                time.sleep(args.every)
    except KeyboardInterrupt:
        pass
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


if __name__ == "__main__":
    main()
