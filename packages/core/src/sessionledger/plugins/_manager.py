"""Build a ledger's plugin manager and call its hooks with typed results.

``pm.hook.x(...)`` returns ``Any`` and stops at the first exception; the hooks need
per-implementation containment (observers), registration order (flush) and the name of
the plugin behind each result (catalog). So hooks are called here, implementation by
implementation, and ``Any`` stops at this module's boundary.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import types
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import pluggy

from sessionledger._errors import ConfigError
from sessionledger.model._registry import (
    CORE_PLUGIN_NAME,
    PROJECT_NAME,
    EventType,
    EventTypeRegistry,
    core_event_types,
)
from sessionledger.model._session import SessionHooks
from sessionledger.plugins import _hookspecs as hookspecs
from sessionledger.plugins._hookspecs import LogFinding, hookimpl

if TYPE_CHECKING:
    from sessionledger.model._events import SessionEvent
    from sessionledger.model._session import Session

logger = logging.getLogger("sessionledger")

#: Set to a non-empty value other than "0" to skip entry-point discovery.
AUTOLOAD_SWITCH = "SESSIONLEDGER_DISABLE_PLUGIN_AUTOLOAD"


class _CorePlugin:
    """The core vocabulary, registered like any plugin."""

    @hookimpl
    def ledger_event_types(self) -> list[EventType]:
        return core_event_types()


def autoload_enabled(load_entrypoints: bool) -> bool:
    """Tell whether entry points are loaded: the argument, unless the switch disables it."""
    switch = os.environ.get(AUTOLOAD_SWITCH, "")
    return load_entrypoints and switch in ("", "0")


def make_plugin_manager(
    plugins: Iterable[object] = (),
    *,
    load_entrypoints: bool = True,
    builtins: Iterable[object] = (),
) -> pluggy.PluginManager:
    """Return a fresh manager: the core vocabulary, *builtins* (the core's own other
    plugins: the ledger passes the ``memory:`` backend), entry points of group
    ``sessionledger``, *plugins*, then what ``ledger_plugins`` adds. Invalid plugins
    raise ``ConfigError``.
    """
    pm = pluggy.PluginManager(PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    try:
        pm.register(_CorePlugin(), name=CORE_PLUGIN_NAME)
        for plugin in builtins:
            pm.register(plugin, name=_readable_name(pm, plugin))
        if autoload_enabled(load_entrypoints):
            pm.load_setuptools_entrypoints(PROJECT_NAME)
        for plugin in plugins:
            pm.register(plugin, name=_readable_name(pm, plugin))
        registered = tuple(pm.get_plugins())
        for impl in _impls(pm, "ledger_plugins"):
            extra = _call(impl, plugins=registered)
            for plugin in extra or ():
                pm.register(plugin, name=_readable_name(pm, plugin))
        pm.check_pending()
    except pluggy.PluginValidationError as error:
        raise ConfigError(f"invalid sessionledger plugin: {error}") from error
    except ValueError as error:  # pluggy: plugin or name already registered
        raise ConfigError(f"cannot register plugin: {error}") from error
    for name in ("ledger_validate", "ledger_committed", "ledger_flush"):
        for impl in _impls(pm, name):
            if impl.hookwrapper or impl.wrapper:
                raise ConfigError(
                    f"plugin {impl.plugin_name!r}: {name} does not support wrapper implementations"
                )
    return pm


_default_types: EventTypeRegistry | None = None


def default_event_types() -> EventTypeRegistry:
    """Return the registry a backend built without one reads with: the core vocabulary
    plus what entry-point plugins declare (docs/backends.md, "the policy object"). Built
    once, on first use."""
    global _default_types  # noqa: PLW0603 - built on first use, never at import
    if _default_types is None:
        _default_types = PluginSet(make_plugin_manager()).event_types
    return _default_types


def _readable_name(pm: pluggy.PluginManager, plugin: object) -> str:
    """Name a plugin after its module or class (pluggy would use ``id()``), so logs and
    errors name something a reader can find; a second instance gets ``#2``."""
    if isinstance(plugin, types.ModuleType):
        base = plugin.__name__
    else:
        base = f"{type(plugin).__module__}.{type(plugin).__qualname__}"
    name, count = base, 1
    while pm.has_plugin(name):
        count += 1
        name = f"{base}#{count}"
    return name


def _impls(pm: pluggy.PluginManager, hook_name: str) -> list[pluggy.HookImpl]:
    """Return the implementations of *hook_name* in pluggy's call order."""
    caller: pluggy.HookCaller = getattr(pm.hook, hook_name)
    return list(reversed(caller.get_hookimpls()))


def _registration_order(pm: pluggy.PluginManager, hook_name: str) -> list[pluggy.HookImpl]:
    caller: pluggy.HookCaller = getattr(pm.hook, hook_name)
    return caller.get_hookimpls()


def _call(impl: pluggy.HookImpl, **kwargs: Any) -> Any:
    return impl.function(*[kwargs[name] for name in impl.argnames])


def _adapt(impl: pluggy.HookImpl) -> Callable[[Session, SessionEvent], object]:
    # Implementations may take any subset of (session, event); adapt once, call cheaply.
    function = impl.function
    names = tuple(impl.argnames)
    if names == ("session", "event"):
        return function
    if names == ("event",):
        return lambda session, event: function(event)
    if names == ("session",):
        return lambda session, event: function(session)
    if names == ("event", "session"):
        return lambda session, event: function(event, session)
    return lambda session, event: function()


class PluginSet:
    """The typed face of one ledger's plugin manager."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm
        self.event_types = self._collect_event_types()
        self.session_hooks = SessionHooks(
            validators=tuple(_adapt(impl) for impl in _impls(pm, "ledger_validate")),
            observers=tuple(
                (impl.plugin_name, _adapt(impl)) for impl in _impls(pm, "ledger_committed")
            ),
            event_types=self.event_types,
            refuse_unknown_types=True,
        )

    def _collect_event_types(self) -> EventTypeRegistry:
        registry = EventTypeRegistry()
        for impl in _registration_order(self.pm, "ledger_event_types"):
            declared = _call(impl) or ()
            if not isinstance(declared, Iterable):
                raise ConfigError(
                    f"plugin {impl.plugin_name!r}: ledger_event_types must return a list"
                )
            registry.register_all(
                declared,
                plugin=impl.plugin_name,
                allow_surface=impl.plugin_name == CORE_PLUGIN_NAME,
            )
        return registry

    def backends(self) -> dict[str, Callable[..., object]]:
        """Return ``{scheme: factory}`` from every plugin; a scheme claimed twice is an error."""
        found: dict[str, Callable[..., object]] = {}
        owners: dict[str, str] = {}
        for impl in _registration_order(self.pm, "ledger_backends"):
            for scheme, factory in dict(_call(impl) or {}).items():
                if scheme in found:
                    raise ConfigError(
                        f"store scheme {scheme!r} is served by both {owners[scheme]!r} "
                        f"and {impl.plugin_name!r}"
                    )
                found[scheme] = factory
                owners[scheme] = impl.plugin_name
        return found

    def offered_validators(self) -> list[object]:
        """Return the fresh validators the plugins offer to a command that writes events
        on the user's behalf (``ledger_offered_validators``), in registration order."""
        registered = tuple(self.pm.get_plugins())
        offered: list[object] = []
        for impl in _registration_order(self.pm, "ledger_offered_validators"):
            found = _call(impl, plugins=registered) or ()
            if not isinstance(found, Iterable):
                raise ConfigError(
                    f"plugin {impl.plugin_name!r}: ledger_offered_validators must return a list"
                )
            offered.extend(found)
        return offered

    def log_checkers(self) -> list[str]:
        """Name the plugins that check a stored log offline (``ledger_check_log``)."""
        return [impl.plugin_name for impl in _registration_order(self.pm, "ledger_check_log")]

    def check_log(self, events: Sequence[SessionEvent]) -> list[LogFinding]:
        """Return what every ``ledger_check_log`` finds in *events*: plugin by plugin in
        registration order, each plugin's findings in its own order."""
        findings: list[LogFinding] = []
        for impl in _registration_order(self.pm, "ledger_check_log"):
            found = _call(impl, events=events) or ()
            if not isinstance(found, Iterable):
                raise ConfigError(
                    f"plugin {impl.plugin_name!r}: ledger_check_log must return a list"
                )
            for finding in found:
                if not all(hasattr(finding, name) for name in ("seq", "rule", "message")):
                    raise ConfigError(
                        f"plugin {impl.plugin_name!r}: ledger_check_log returned "
                        f"{type(finding).__qualname__}, which lacks seq, rule or message"
                    )
                findings.append(finding)
        return findings

    def session_created(self, session: Session) -> None:
        """Announce a live session; an exception refuses it (and propagates)."""
        for impl in _impls(self.pm, "ledger_session_created"):
            _call(impl, session=session)

    def session_closed(self, session: Session) -> None:
        """Announce that a session left the ledger; failures are logged, never raised."""
        for impl in _impls(self.pm, "ledger_session_closed"):
            try:
                _call(impl, session=session)
            except Exception:
                logger.warning(
                    "plugin %s failed in ledger_session_closed for session %r",
                    impl.plugin_name,
                    session.id,
                    exc_info=True,
                )

    async def flush(self, session: Session, *, also: Awaitable[None] | None = None) -> None:
        """Run every ``ledger_flush`` together with *also* (the ledger's own write-behind);
        after all settle raise the first failure in registration order, *also* ranking
        last (docs/plugins.md, "the hooks").
        """
        outcomes: list[BaseException | Awaitable[Any] | None] = []
        for impl in _registration_order(self.pm, "ledger_flush"):
            try:
                outcomes.append(_call(impl, session=session))
            except Exception as error:
                outcomes.append(error)
        if not outcomes and also is not None:
            await also  # the common case: no plugin flushes; a gather would cost a task
            return
        outcomes.append(also)
        pending = [item for item in outcomes if inspect.isawaitable(item)]
        results = await asyncio.gather(*pending, return_exceptions=True)
        settled = iter(results)
        for item in outcomes:
            outcome = next(settled) if inspect.isawaitable(item) else item
            if isinstance(outcome, BaseException):
                raise outcome
