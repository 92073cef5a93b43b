"""`python -m pollux`: the same command line as the `pollux` script (for environments without the script on PATH)."""

from pollux.cli import main

main()
