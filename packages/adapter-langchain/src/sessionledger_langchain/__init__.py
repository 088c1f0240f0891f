"""LangChain's chat message history on a sessionledger ledger.

``LedgerChatMessageHistory(session_id, ledger)`` implements
``langchain_core.chat_history.BaseChatMessageHistory`` and works under
``RunnableWithMessageHistory``; ``LedgerThread(url)`` gives sync code a ledger on its own
loop thread. The mapping onto the core vocabulary is in this package's README.
"""

from sessionledger_langchain._history import LedgerChatMessageHistory, LedgerThread
from sessionledger_langchain._mapping import UnpairedToolMessageError, UnsupportedMessageError

__all__ = [
    "LedgerChatMessageHistory",
    "LedgerThread",
    "UnpairedToolMessageError",
    "UnsupportedMessageError",
]
