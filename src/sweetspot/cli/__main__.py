"""`python -m sweetspot.cli`."""

from sweetspot.cli import main

main()
