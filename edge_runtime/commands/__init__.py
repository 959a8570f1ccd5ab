"""Sub-commands of the `edge-runtime` command line, one module each."""
