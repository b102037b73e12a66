"""Where the package's data files are: the hardware table, the layer tables and the default
instance, found with importlib.resources, so that a wheel installed anywhere finds them as a
checkout does.

Layout (package `solver.data`, the only copies; the checkout's top-level `models/` and
`instances/` hold symbolic links to these files):
    models/<name>.csv         layer tables (vgg16, resnet50, bert_base, gpt2_small, mlp)
    models/hardware.csv       the hardware table
    instances/default.toml    the default instance, with default_devices.csv, default_links.csv
"""
from __future__ import annotations

import atexit
import contextlib
from functools import lru_cache
from importlib.resources import as_file, files
from pathlib import Path

_extracted = contextlib.ExitStack()
atexit.register(_extracted.close)


@lru_cache(maxsize=None)
def data_dir(name: str) -> Path:
    """The folder `name` ("models" or "instances") of the package data, as a file-system path.

    A zipped install is extracted once to a temporary folder, removed at exit."""
    res = files("solver.data") / name
    if isinstance(res, Path):
        return res
    return _extracted.enter_context(as_file(res))


def models_dir() -> Path:
    """The packaged layer tables and hardware table."""
    return data_dir("models")


def default_instance() -> Path:
    """The packaged default instance file (`dynpar run` with no argument)."""
    return data_dir("instances") / "default.toml"


def packaged_models() -> list[str]:
    """Names of the packaged layer tables (`model = "<name>"` in an instance)."""
    return sorted(p.stem for p in models_dir().glob("*.csv") if p.name != "hardware.csv")
