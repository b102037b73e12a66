"""Package data, read with importlib.resources (solver.io.data): `models/` holds the layer
tables (<name>.csv) and the hardware table (hardware.csv); `instances/` holds the default
instance (default.toml and its traces). These are the only copies: the checkout's top-level
`models/` and `instances/` folders hold symbolic links to them."""
