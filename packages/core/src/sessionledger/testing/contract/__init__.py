"""The persistence contract as tests any backend runs unchanged (docs/backends.md).

Use it from a test module::

    import pytest
    from sessionledger.testing.contract import PersistenceContract

    class TestMyBackendContract(PersistenceContract):
        @pytest.fixture
        def ledger_backend_factory(self, tmp_path):
            return lambda **options: MyPersistence(tmp_path / "store", **options)

The factory returns a *new* backend object over the *same* storage on every call (that
is how reopening is tested) and accepts ``event_types=`` (an ``EventTypeRegistry``).
Optionally override ``ledger_backend_tamper`` to return a ``Tamper`` for your medium;
the tests of torn tails, corruption and format versions are skipped without one.
Every clause runs under BlockBuster: a blocking call the backend makes on the event loop's
thread fails it (docs/backends.md, "no blocking call on the event loop").
``PersistenceContract`` does not start with ``Test``, so pytest collects nothing until
you subclass it. The clauses live one module each: ``writing``, ``reading``, ``repair``,
``ownership``, ``listing``, ``publishing``, ``through_ledger`` and ``feed``; docs/backends.md, "the
contract kit", explains them.
"""

from sessionledger.testing.contract.base import BackendFactory, Tamper
from sessionledger.testing.contract.kit import PersistenceContract

__all__ = ["BackendFactory", "PersistenceContract", "Tamper"]
