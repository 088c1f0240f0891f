"""``PersistenceContract``: every clause of the kit, in one class to subclass."""

from __future__ import annotations

from sessionledger.testing.contract.feed import FeedClauses
from sessionledger.testing.contract.listing import ListingClauses
from sessionledger.testing.contract.ownership import OwnershipClauses
from sessionledger.testing.contract.publishing import PublishingClauses
from sessionledger.testing.contract.reading import ReadingClauses
from sessionledger.testing.contract.repair import RepairClauses
from sessionledger.testing.contract.through_ledger import LedgerClauses
from sessionledger.testing.contract.writing import WritingClauses

__all__ = ["PersistenceContract"]


class PersistenceContract(
    WritingClauses,
    ReadingClauses,
    RepairClauses,
    OwnershipClauses,
    LedgerClauses,
    ListingClauses,
    PublishingClauses,
    FeedClauses,
):
    """The persistence contract as tests (docs/backends.md, "the contract kit"); subclass
    it and provide ``ledger_backend_factory``."""
