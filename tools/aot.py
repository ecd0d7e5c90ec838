"""tfjit-aot without installing the package: ``python tools/aot.py --graph=... --config=...``.

See tfjit/aot/cli.py for the flags.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tfjit.aot.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
