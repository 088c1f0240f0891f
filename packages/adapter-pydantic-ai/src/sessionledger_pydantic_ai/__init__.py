"""pydantic-ai message history kept in a sessionledger ledger.

``LedgerHistory(session_id, ledger)`` gives an agent its history from the ledger
(``await load()``, passed as ``message_history=``) and writes what a run produced back
(``await record(messages)``). Each pydantic-ai message becomes core events (``turn/*``,
``step/*``, ``user/message``, ``assistant/message``, ``tool/call``, ``tool/result``); the
exact JSON of the message rides on the ledger message it anchors, so ``load`` returns what
was recorded. See the package README for the mapping.
"""

from __future__ import annotations

from sessionledger_pydantic_ai.history import META_KEY, LedgerHistory

__all__ = ["META_KEY", "LedgerHistory"]
