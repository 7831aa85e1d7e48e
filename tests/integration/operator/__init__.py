"""Operator tests against the real control plane."""
