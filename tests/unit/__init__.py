"""Unit tests: pure logic, no cluster."""
