"""Unit tests of the contract (operator/kuzk/contract/)."""
