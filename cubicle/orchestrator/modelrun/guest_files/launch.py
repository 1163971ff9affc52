"""Start a program detached from the caller and exit at once (runs inside the guest).

Usage: ``python3 launch.py LOGFILE -- ARGV...``. The program gets its own session, stdin from
/dev/null and stdout/stderr appended to LOGFILE, so the agent's ``exec`` (which waits for the
process it ran and for its output pipes) returns immediately. Prints the child's pid.
"""

from __future__ import annotations

import subprocess
import sys


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: launch.py LOGFILE -- ARGV...", file=sys.stderr)
        return 2
    log_path, command = argv[0], argv[2:]
    with open(log_path, "ab") as log:
        child = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )
    print(child.pid)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
