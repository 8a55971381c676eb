"""``python -m ssmpde``: the ``ssmpde`` command."""

import sys

try:
    from ssmpde.cli import main
except KeyboardInterrupt:  # Ctrl-C before main() can catch it: one line, as main() prints
    print("\nssmpde: interrupted before anything was saved; nothing to resume", file=sys.stderr)
    sys.exit(130)

if __name__ == "__main__":  # not when multiprocessing re-imports it in a worker
    sys.exit(main())
