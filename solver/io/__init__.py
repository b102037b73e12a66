"""Reading and writing the world: instance files, layer tables, profile importers, the
hardware table and seeded synthetic instances."""
from .instance import load_instance, save_instance

__all__ = ["load_instance", "save_instance"]
