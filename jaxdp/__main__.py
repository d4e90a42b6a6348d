"""``python -m jaxdp`` runs the command line."""

import sys

from jaxdp.cli import main

if __name__ == "__main__":
    sys.exit(main())
