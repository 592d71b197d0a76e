"""JAX's GPU memory, shared by the run's workers.

`run --jobs N` gives each of N worker processes its own JAX client, on the same GPU. Each client would reserve
three quarters of the GPU's memory when it starts (JAX's "GPU memory allocation" page names concurrent JAX
processes as the common cause of its out-of-memory failures); the cases' arrays are small, so each worker takes
memory as it needs it instead. An XLA_PYTHON_CLIENT_PREALLOCATE the user set is left as it is.
"""

from __future__ import annotations

import os


def allocate_on_demand() -> None:
    """Call it before JAX starts its GPU client (before the first array or device query)."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
