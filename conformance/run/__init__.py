"""Running: the runner, its worker processes, case selection and output directories. Composes the
judge, cases and adapters; never imports reports."""
