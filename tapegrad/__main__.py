"""``python -m tapegrad`` / the ``tapegrad`` console script (see tapegrad.cli)."""

import signal
import sys
import threading


def main(argv=None) -> int:
    from .cli import main as cli_main
    from .cli.runfiles import interrupt_once

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, interrupt_once)  # this process ends at the first Ctrl-C
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
