"""The contract's whole-log clauses: ``publish`` stores a new session all at once, checked
as a read checks a log and read back before anyone sees it (docs/backends.md, "whole
logs")."""

from __future__ import annotations

from typing import Any

import pytest

from sessionledger._errors import ReadBackMismatchError, SeedError, SessionExistsError
from sessionledger.model._events import SessionEvent
from sessionledger.storage import _publishing as publishing
from sessionledger.storage._persistence import SessionPersistence
from sessionledger.testing.contract.base import (
    BackendFactory,
    ContractBase,
    header_for,
    make_log,
    same_events,
    second_writer,
)

__all__ = ["PublishingClauses"]

#: Nested deeper than a comparison with ``==`` (or ``repr``) can recurse.
DEEP = 3_000


def _deep_value(depth: int = DEEP) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"k": [value]}
    return value


async def _listed(backend: SessionPersistence) -> list[str]:
    return [header.id for header in await backend.list()]


class PublishingClauses(ContractBase):
    """``publish``: a whole log, in batches, visible all at once or not at all."""

    @pytest.mark.asyncio
    async def test_publish_stores_a_whole_log_in_batches(
        self, backend_factory: BackendFactory, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(publishing, "PUBLISH_BATCH_EVENTS", 4)  # many batches, small log
        events = make_log(turns=3)
        backend = backend_factory()
        await backend.publish(header_for("whole"), events)
        reader = backend_factory()
        stored = await reader.inspect("whole")
        assert stored.header == header_for("whole")
        assert same_events(events, stored.events)
        assert await _listed(reader) == ["whole"]
        # The publisher holds the session, as a creating append does, and continues it.
        more = make_log(turns=4)[len(events) :]
        await backend.append("whole", more)
        assert same_events(events + more, (await reader.inspect("whole")).events)
        with pytest.raises(SessionExistsError):
            await backend.publish(header_for("whole"), events)
        with pytest.raises(SessionExistsError):
            await second_writer(backend_factory, backend).publish(header_for("whole"), events)

    @pytest.mark.asyncio
    async def test_publish_refuses_a_log_a_read_would_refuse_and_stores_nothing(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory()
        events = make_log(turns=2)
        gap = [*events[:3], *events[4:]]
        with pytest.raises(SeedError):
            await backend.publish(header_for("gap"), gap)
        with pytest.raises(SeedError):
            await backend.publish(header_for("empty"), [])
        assert await _listed(backend) == []
        await backend.publish(header_for("gap"), events)  # the id was left free
        assert same_events(events, (await backend.inspect("gap")).events)

    @pytest.mark.asyncio
    async def test_a_log_that_reads_back_otherwise_is_reported_and_never_half_there(
        self, backend_factory: BackendFactory, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(publishing, "PUBLISH_BATCH_EVENTS", 4)
        events = make_log(turns=2)
        # The store reads the log back; this check sees it differ at seq 3.
        monkeypatch.setattr(publishing, "first_difference", lambda *_: ("made up", 3))
        backend = backend_factory()
        with pytest.raises(ReadBackMismatchError) as raised:
            await backend.publish(header_for("differs"), events)
        assert raised.value.difference == "made up"
        assert raised.value.session_id == "differs"
        assert raised.value.seq == 3
        reader = backend_factory()
        listed = await _listed(reader)
        assert raised.value.published is ("differs" in listed)
        if raised.value.published:  # a store that checks only afterwards: left whole
            assert same_events(events, (await reader.inspect("differs")).events)
            return
        assert listed == []
        monkeypatch.undo()
        await backend.publish(header_for("differs"), events)  # nothing was left in the way
        assert same_events(events, (await reader.inspect("differs")).events)

    @pytest.mark.asyncio
    async def test_publish_checks_a_deep_value_without_recursing(
        self, backend_factory: BackendFactory
    ) -> None:
        events = make_log(turns=1)
        deep = SessionEvent("note/deep", len(events), 1, {"v": _deep_value()}, ignorable=True)
        backend = backend_factory()
        await backend.publish(header_for("deep"), [*events, deep])
        reader = backend_factory()
        assert len((await reader.inspect("deep")).events) == len(events) + 1
        raw = await reader.log_store.read_log("deep")
        assert raw is not None
        assert publishing.first_difference(header_for("deep"), [*events, deep], raw) is None
