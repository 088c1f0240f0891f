"""Full-text search over messages: which text is indexed, words, matching, snippets.

Only what a person wrote or read is searched: the text blocks of ``user/message``,
``assistant/message`` and of the tool-result blocks of ``tool/result`` (docs/listing.md,
"search"); never chunks, reasoning or tool-call arguments. A backend with an index
(SQLite FTS5, PostgreSQL full text) writes each event's ``IndexedText`` in the same
transaction as the event; one without scans, with the same word rule as here.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, NamedTuple, final

from sessionledger.model._events import SessionEvent
from sessionledger.model._vocabulary import ASSISTANT_MESSAGE, TOOL_RESULT, USER_MESSAGE

#: The event types whose text is searched.
SEARCHED_TYPES: Final = frozenset((USER_MESSAGE, ASSISTANT_MESSAGE, TOOL_RESULT))

# A word is a run of letters and digits: "_" and punctuation separate words, as in
# SQLite FTS5's default tokenizer.
_WORD: Final = re.compile(r"[^\W_]+")

#: Characters of context a snippet keeps before the first match, and in all.
SNIPPET_BEFORE, SNIPPET_WIDTH = 40, 160


class IndexedText(NamedTuple):
    """The searchable text of one event, as an index stores it."""

    seq: int
    type: str
    time: int
    text: str


@final
@dataclasses.dataclass(frozen=True, slots=True)
class TextQuery:
    """What a store's index is asked: events whose text holds every one of ``words``
    (lower case), newest first (time, then seq, descending), at most ``limit``, in
    ``session`` only when given, of ``types`` only when given."""

    words: tuple[str, ...]
    limit: int
    session: str | None = None
    types: frozenset[str] | None = None

    def matches(self, text: str) -> bool:
        """Whether *text* holds every word of the query, as the index would tell."""
        return matches(text, self.words)


@final
@dataclasses.dataclass(frozen=True, slots=True)
class SearchHit:
    """One event whose text matched: where it is, when, and a line of it around the match."""

    session_id: str
    seq: int
    type: str
    snippet: str
    time: int

    def to_json(self) -> dict[str, Any]:
        """Return the hit as a JSON object."""
        return {
            "sessionId": self.session_id,
            "seq": self.seq,
            "type": self.type,
            "time": self.time,
            "snippet": self.snippet,
        }


def words(text: str) -> tuple[str, ...]:
    """Return the lower-case words of *text*, in order, each once."""
    return tuple(dict.fromkeys(word.lower() for word in _WORD.findall(text)))


def _text_blocks(content: object) -> Iterator[str]:
    if not isinstance(content, Sequence) or isinstance(content, str):
        return
    for block in content:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text":
            text = block.get("text")
            if type(text) is str:
                yield text
        elif kind == "tool-result":
            yield from _text_blocks(block.get("content"))


def message_text(event: SessionEvent) -> str | None:
    """Return the searchable text of *event* (its text blocks, one per line), or None when
    its type is not searched or it holds no text."""
    kind = event.type
    if kind not in SEARCHED_TYPES:
        return None
    data = event.data
    if not isinstance(data, Mapping):
        return None
    message = data if kind == USER_MESSAGE else data.get("message")
    if not isinstance(message, Mapping):
        return None
    text = "\n".join(_text_blocks(message.get("content")))
    return text or None


def indexed_texts(events: Iterable[SessionEvent]) -> list[IndexedText]:
    """Return the searchable text of every event of *events* that has some."""
    found: list[IndexedText] = []
    for event in events:
        if event.type in SEARCHED_TYPES:
            text = message_text(event)
            if text is not None:
                found.append(IndexedText(event.seq, event.type, event.time, text))
    return found


def matches(text: str, query: Sequence[str]) -> bool:
    """Whether *text* holds every word of *query* (lower-case words) as a word."""
    have = set(words(text))
    return all(word in have for word in query)


def snippet(text: str, query: Sequence[str]) -> str:
    """Return one line of *text* around the first word of *query* it holds."""
    start = 0
    for match in _WORD.finditer(text):
        if match.group().lower() in query:
            start = match.start()
            break
    begin = max(0, start - SNIPPET_BEFORE)
    if begin:
        # Start at a word boundary, not in the middle of one.
        space = text.find(" ", begin, start)
        begin = space + 1 if space >= 0 else begin
    piece = " ".join(text[begin : begin + SNIPPET_WIDTH].split())
    if begin:
        piece = "…" + piece
    if begin + SNIPPET_WIDTH < len(text):
        piece += "…"
    return piece
