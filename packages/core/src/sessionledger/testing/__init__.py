"""Test support for sessionledger: reusable hypothesis strategies and the contract test kit."""
