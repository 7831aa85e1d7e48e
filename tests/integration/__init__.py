"""Integration tests against the real control plane."""
