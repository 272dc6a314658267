"""``python -m steadyloop`` runs the command line."""

from steadyloop._entry import main

main()
