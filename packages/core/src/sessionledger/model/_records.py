"""The shapes of stored records, declared once: the event envelope and the chunk rows.

Every backend stores the same two kinds of record (docs/formats.md): an event envelope,
and a packed chunk row standing for a run of streamed deltas. Their keys and field types
are written here as msgspec Structs, and the writer's checks, the rules of the read path
and its common case (``sessionledger.storage._decode``) take them from here. A Struct says what a
record in the writer's form holds; it does not replace the rules: a record it refuses
still goes to them, which accept or refuse it and say why (docs/durability.md, "torn
tails and corruption").
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Final

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from sessionledger.model._snapshot import MAX_SAFE_INTEGER

#: A seq: a safe non-negative integer (docs/events.md, "the envelope").
Seq = Annotated[int, Meta(ge=0, le=MAX_SAFE_INTEGER)]
#: A time, turn, step, index or gap: a safe integer, within ±(2**53 - 1).
Safe = Annotated[int, Meta(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER)]


class Envelope(
    Struct,
    frozen=True,
    gc=False,
    forbid_unknown_fields=True,
    rename={"surface_op": "surfaceOp", "source_event_seqs": "sourceEventSeqs"},
):
    """An event envelope as stored (docs/events.md, "the envelope"). ``data`` and
    ``surfaceOp`` are any JSON value here: ``SessionEvent.from_json``'s rules check them."""

    type: str
    seq: Seq
    time: Safe
    data: Any
    surface_op: Any = UNSET
    source_event_seqs: list[Seq] | UnsetType = UNSET
    ignorable: bool | UnsetType = UNSET


class TextRowData(Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    """The ``data`` of a text or reasoning row: where its stream block is, the gaps
    between its members' times and their texts (docs/formats.md, "chunk rows")."""

    turn: Safe
    step: Safe
    index: Safe
    dt: list[Safe]
    texts: list[str]


class ToolRowData(Struct, frozen=True, gc=False, forbid_unknown_fields=True, kw_only=True):
    """The ``data`` of a tool-call row: as a text row's, with the call's id, its name
    when every member carried one, and the arguments' pieces (in the writer's key
    order: keyword-only, so the optional name can come before them)."""

    turn: Safe
    step: Safe
    index: Safe
    dt: list[Safe]
    id: str
    name: str | UnsetType = UNSET
    args: list[str]


class TextRow(Struct, frozen=True, gc=False, forbid_unknown_fields=True, tag_field="type",
              tag="text-chunks"):  # fmt: skip
    """A run of ``text-delta`` chunks stored as one record."""

    MEMBER: ClassVar[str] = "text-delta"

    seq0: Seq
    time0: Safe
    data: TextRowData


class ReasoningRow(TextRow, frozen=True, gc=False, tag="reasoning-chunks"):
    """A run of ``reasoning-delta`` chunks stored as one record."""

    MEMBER: ClassVar[str] = "reasoning-delta"


class ToolRow(Struct, frozen=True, gc=False, forbid_unknown_fields=True, tag_field="type",
              tag="tool-call-chunks"):  # fmt: skip
    """A run of ``tool-call-delta`` chunks of one call stored as one record."""

    MEMBER: ClassVar[str] = "tool-call-delta"

    seq0: Seq
    time0: Safe
    data: ToolRowData


def field_names(shape: type[Struct]) -> frozenset[str]:
    """The keys a record of *shape* may hold, as stored (its tag included)."""
    info = msgspec.structs.fields(shape)
    tag = shape.__struct_config__.tag_field
    return frozenset([field.encode_name for field in info] + ([tag] if tag else []))


#: The keys of an envelope, and the four it must hold.
ENVELOPE_KEYS: Final = field_names(Envelope)
REQUIRED_ENVELOPE_KEYS: Final = tuple(
    field.encode_name for field in msgspec.structs.fields(Envelope) if field.required
)
#: The keys of a row, and of its data by row kind (a tool row's "name" is optional).
ROW_KEYS: Final = field_names(TextRow)
ROW_DATA_KEYS: Final = {"text": field_names(TextRowData), "tool": field_names(ToolRowData)}
