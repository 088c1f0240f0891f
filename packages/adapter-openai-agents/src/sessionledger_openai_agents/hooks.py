"""``LedgerRunHooks``: tell the ledger when an approved call starts running.

The SDK runs an approved tool before it saves anything, so a ``LedgerSession`` alone
cannot know that a paused call (README, "Approvals") has started. Passed to
``Runner.run(..., hooks=LedgerRunHooks(session))``, these hooks record the start just
before the tool is invoked: a crash while it runs is then repaired as "outcome unknown"
instead of leaving the call waiting for an approval that was already given.
"""

from __future__ import annotations

from typing import Any

from agents import Agent, RunContextWrapper, RunHooks, Tool

from sessionledger_openai_agents.session import LedgerSession


class LedgerRunHooks(RunHooks[Any]):
    """Run hooks that record the start of a paused call of *session* (subclass to add
    hooks of your own, calling ``super().on_tool_start`` first)."""

    def __init__(self, session: LedgerSession) -> None:
        self.session = session

    async def on_tool_start(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool
    ) -> None:
        call_id = getattr(context, "tool_call_id", None)
        if isinstance(call_id, str) and call_id:
            await self.session.start_paused_call(call_id)
