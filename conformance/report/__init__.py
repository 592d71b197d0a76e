"""Report writers. They read result rows and manifests, never a framework or the reference."""
