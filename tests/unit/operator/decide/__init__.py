"""Unit tests of the pure decision (operator/kuzk/operator/decide/)."""
