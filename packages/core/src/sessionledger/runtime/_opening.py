"""Opening a store by its URL: the plugins that serve each scheme, and the backend they
build (docs/backends.md, "URL schemes")."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from sessionledger._errors import ConfigError
from sessionledger.plugins._manager import PluginSet, make_plugin_manager
from sessionledger.storage import _memory as memory
from sessionledger.storage._persistence import SessionPersistence

#: The core's own plugins besides its vocabulary: the ``memory:`` backend.
_BUILTINS: Final = (memory,)


def plugin_set(plugins: Iterable[object], *, load_entrypoints: bool) -> PluginSet:
    """The plugins of one ledger or store: *plugins*, the core's own, and (when
    *load_entrypoints*) those installed under the ``sessionledger`` entry point."""
    return PluginSet(
        make_plugin_manager(plugins, load_entrypoints=load_entrypoints, builtins=_BUILTINS)
    )


def _scheme(url: str) -> str:
    scheme, colon, _ = url.partition(":")
    if not colon or not scheme:
        raise ConfigError(f"store URL {url!r} has no scheme (expected e.g. 'sqlite:ledger.db')")
    return scheme


def open_with(plugins: PluginSet, url: str) -> SessionPersistence:
    """The backend *plugins* build for *url*, reading with their event types."""
    if type(url) is not str:
        raise ConfigError(f"store URL must be a string, got {type(url).__qualname__}")
    factories = plugins.backends()
    scheme = _scheme(url)
    factory = factories.get(scheme)
    if factory is None:
        known = ", ".join(f"{name}:" for name in sorted(factories)) or "none"
        raise ConfigError(f"no backend serves {scheme}: URLs (registered schemes: {known})")
    return factory(url, event_types=plugins.event_types)


def open_store(
    url: str, *, plugins: Iterable[object] = (), load_entrypoints: bool = True
) -> SessionPersistence:
    """Return the backend serving *url* (``memory:``, ``jsonl:DIR``, ``sqlite:PATH``…),
    resolved through the ``ledger_backends`` hook. Unknown scheme → ``ConfigError``.
    """
    return open_with(plugin_set(plugins, load_entrypoints=load_entrypoints), url)
