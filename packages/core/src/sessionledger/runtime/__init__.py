"""The ledger at run time: ``Ledger`` (many sessions over one store), its durability
policy (write-behind, flush, backlog), opening a store by URL, and handing work to the
ledger's event loop from other threads. The top of the core; the modules here are
internal (docs/api.md)."""
