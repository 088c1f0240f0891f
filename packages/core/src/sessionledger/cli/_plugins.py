"""Plugins named on the command line with ``--plugin module:attribute``.

A plugin published under the ``sessionledger`` entry-point group is found without this;
``--plugin`` is for one that is not (a harness's own module, a script being tried out),
so that its event types are known to ``resume``-like commands and its sessions read
interpreted. The attribute may be a plugin object or module, or a class, which is
instantiated without arguments. The current directory is searched first, as
``python -m`` would, so a plugin module next to the user's script is found.
"""

from __future__ import annotations

import os
import pkgutil
import sys
from collections.abc import Iterable

from sessionledger._errors import ConfigError


def _load(spec: str) -> object:
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise ConfigError(
            f"--plugin {spec!r}: expected module:attribute, such as 'myharness.plugin:Plan'"
        )
    try:
        target: object = pkgutil.resolve_name(spec)
    except ImportError as error:
        raise ConfigError(f"--plugin {spec!r}: cannot import {module_name!r}: {error}") from error
    except AttributeError as error:  # names what is missing, also inside the module
        raise ConfigError(f"--plugin {spec!r}: {error}") from error
    except ValueError:
        raise ConfigError(f"--plugin {spec!r}: not a module:attribute name") from None
    if isinstance(target, type):
        try:
            return target()
        except Exception as error:
            raise ConfigError(
                f"--plugin {spec!r}: cannot instantiate {target.__qualname__} "
                f"without arguments: {error}"
            ) from error
    return target


def load_plugins(specs: Iterable[str]) -> list[object]:
    """Return the plugin objects *specs* name, in order; each problem is a ``ConfigError``."""
    specs = list(specs)
    if specs and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    return [_load(spec) for spec in specs]


def invariants_plugins() -> list[object]:
    """Return a fresh invariants plugin when it is installed (``[]`` otherwise): the
    commands that write events (``demo``, ``import``) run with the invariants on."""
    try:
        from sessionledger_invariants import InvariantsPlugin
    except ImportError:
        return []
    return [InvariantsPlugin()]
