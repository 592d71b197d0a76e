"""`python -m conformance` is the `kl-conformance` command."""

import sys

from conformance.cli import main

sys.exit(main())
