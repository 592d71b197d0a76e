"""`python -m conformance` is the `kl-conformance` command."""

import sys

from conformance.entry import main

sys.exit(main())
