"""A subpackage's public names, imported on first use (PEP 562).

Each subpackage's ``__init__`` lists its public names in ``__all__`` and where each lives;
``from tinyol.link import Device`` imports ``tinyol.link.device`` only then, so importing a
subpackage stays cheap (`tinyol info` and `tinyol --help` never load TensorFlow or Flower).
"""
from __future__ import annotations

import importlib


def exports(package: str, table: dict[str, str]):
    """``__getattr__`` and ``__dir__`` for `package` whose public name N lives in module table[N]."""
    def __getattr__(name: str):
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    def __dir__():
        return sorted(table)

    return __getattr__, __dir__
