"""The `dynpar` command line (commands, plots). Nothing in the core imports this package."""
from .commands import main

__all__ = ["main"]
