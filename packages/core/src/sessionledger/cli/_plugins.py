"""Plugins named on the command line with ``--plugin module:attribute``.

A plugin published under the ``sessionledger`` entry-point group is found without this;
``--plugin`` is for one that is not (a harness's own module, a script being tried out),
so that its event types are known to ``resume``-like commands and its sessions read
interpreted. The attribute may be a plugin object or module, or a class, which is
instantiated without arguments. The current directory is searched first, as
``python -m`` would, so a plugin module next to the user's script is found.

The commands find what installed plugins offer them through the hooks, never by a
plugin's name: ``offered_validators`` for the commands that write events on the user's
behalf (docs/plugins.md, "the hooks").
"""

from __future__ import annotations

import os
import pkgutil
import sys
from collections.abc import Iterable

from sessionledger._errors import ConfigError
from sessionledger.runtime._opening import plugin_set


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


def offered_validators(plugins: Iterable[object] = ()) -> list[object]:
    """Return fresh validators that the installed plugins and *plugins* offer to a command
    writing events on the user's behalf (``ledger_offered_validators``): ``demo`` and
    ``import`` run with the invariants on when the invariants plugin is installed.

    Finding them reads the installed distributions: call it off the event loop.
    """
    return plugin_set(plugins, load_entrypoints=True).offered_validators()
