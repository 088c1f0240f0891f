"""Event types known to a ledger: the core vocabulary plus what plugins add.

Why a ledger refuses the others: docs/plugins.md, "event types, and what a ledger refuses".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, final

from sessionledger._errors import ConfigError
from sessionledger.model._vocabulary import (
    CORE_EVENT_TYPES,
    CORE_VALIDATORS,
    LEGACY_VALIDATORS,
    SURFACE_TYPES,
)
from sessionledger.plugins._hookspecs import PROJECT_NAME

#: The plugin name the core vocabulary is registered under (shown by ``catalog``).
CORE_PLUGIN_NAME = "sessionledger"


def unknown_type_at_append(name: str) -> str:
    """The message of an append refused for its type: what is wrong and both remedies."""
    return (
        f"event type {name!r} is not registered in this ledger and not marked ignorable, "
        "so the ledger could not read it back; declare it with EventType(...) returned "
        "from a plugin's ledger_event_types() hook and give the plugin to the ledger "
        f"(plugins=[...], or an entry point in group {PROJECT_NAME!r}), or append it "
        "with ignorable=True"
    )


def unknown_type_in_log(name: str) -> str:
    """The message of a log refused on going live for a type: the likely cause first."""
    return (
        f"event type {name!r} is not registered and the event is not marked ignorable; "
        "the plugin that declares it is probably not loaded: give it to the ledger "
        "(Ledger(plugins=[...]), open_store(url, plugins=[...])), publish it as an "
        f"entry point in group {PROJECT_NAME!r} (its ledger_event_types() hook "
        "declares the type), or pass --plugin module:attribute to the command line. "
        "Reading (inspect, read_from, ls, show) works without it"
    )


@final
@dataclasses.dataclass(frozen=True, slots=True)
class EventType:
    """Declare an event type.

    ``ignorable`` tells readers that do not know the type they may keep it without
    interpreting it (new events of this type carry the marker). ``validate(data)`` runs on
    append and on seed/load and raises to reject; it receives the frozen data.
    """

    name: str
    surface: bool = False
    ignorable: bool = False
    validate: Callable[[Any], None] | None = None

    def __post_init__(self) -> None:
        if type(self.name) is not str or not self.name:
            raise ConfigError(f"event type name must be a non-empty string, got {self.name!r}")


def core_event_types() -> list[EventType]:
    """Return the core vocabulary as ``EventType`` declarations."""
    types = [
        EventType(name, surface=name in SURFACE_TYPES, validate=CORE_VALIDATORS.get(name))
        for name in CORE_EVENT_TYPES
    ]
    types.extend(EventType(name, validate=check) for name, check in LEGACY_VALIDATORS.items())
    return types


@final
class EventTypeRegistry:
    """Name → ``EventType``, remembering which plugin registered each one."""

    __slots__ = ("_plugins", "_types")

    def __init__(self) -> None:
        self._types: dict[str, EventType] = {}
        self._plugins: dict[str, str] = {}

    @classmethod
    def with_core(cls) -> EventTypeRegistry:
        """Return a registry holding only the core vocabulary."""
        registry = cls()
        registry.register_all(core_event_types(), plugin=CORE_PLUGIN_NAME, allow_surface=True)
        return registry

    def register(self, event_type: EventType, *, plugin: str, allow_surface: bool = False) -> None:
        """Add *event_type*; a duplicate name or a plugin surface type is a ``ConfigError``."""
        if type(event_type) is not EventType:
            raise ConfigError(
                f"plugin {plugin!r} returned {event_type!r} where an EventType was expected"
            )
        if event_type.name in self._types:
            raise ConfigError(
                f"event type {event_type.name!r} from plugin {plugin!r} is already registered "
                f"by {self._plugins[event_type.name]!r}"
            )
        if event_type.surface and not allow_surface:
            raise ConfigError(
                f"plugin {plugin!r} declares event type {event_type.name!r} with surface=True; "
                "only user/message, assistant/message and tool/result reach the surface"
            )
        self._types[event_type.name] = event_type
        self._plugins[event_type.name] = plugin

    def register_all(
        self, event_types: Iterable[EventType], *, plugin: str, allow_surface: bool = False
    ) -> None:
        """Register each of *event_types* for *plugin*."""
        for event_type in event_types:
            self.register(event_type, plugin=plugin, allow_surface=allow_surface)

    @property
    def declarations(self) -> Mapping[str, EventType]:
        """A read-only live mapping of name → declaration (fast lookups on hot paths)."""
        return MappingProxyType(self._types)

    def get(self, name: str) -> EventType | None:
        """Return the declaration of *name*, or None when it is unknown."""
        return self._types.get(name)

    def plugin_of(self, name: str) -> str | None:
        """Return the name of the plugin that registered *name*."""
        return self._plugins.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._types

    def __iter__(self) -> Iterator[EventType]:
        return iter(self._types.values())

    def __len__(self) -> int:
        return len(self._types)
