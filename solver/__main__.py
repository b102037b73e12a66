"""`python -m solver ...` is the `dynpar` command line."""
import sys

from .cli import main

sys.exit(main())
