"""A sessionledger ``Session`` for the OpenAI Agents SDK.

``LedgerSession(session_id, ledger)`` implements the SDK's ``Session`` protocol on a
``sessionledger.Ledger``: every item the SDK saves becomes events of the core vocabulary
(``turn/*``, ``step/*``, ``user/message``, ``assistant/message``, ``tool/call``,
``tool/result``), with the exact item JSON kept on the message under ``openaiItem`` so
``get_items`` returns it deep-equal. A run stopped for an approval is recorded as paused,
not crashed; ``LedgerRunHooks`` records when the approved call starts. See the package
README.
"""

from __future__ import annotations

from sessionledger_openai_agents.hooks import LedgerRunHooks
from sessionledger_openai_agents.session import (
    ITEM_KEY,
    KEPT_KEY,
    PLUGIN_NAME,
    PROVIDER,
    REMOVED_KEY,
    LedgerSession,
)

__all__ = [
    "ITEM_KEY",
    "KEPT_KEY",
    "PLUGIN_NAME",
    "PROVIDER",
    "REMOVED_KEY",
    "LedgerRunHooks",
    "LedgerSession",
]
