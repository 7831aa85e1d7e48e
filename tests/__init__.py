"""kuzk test suites (unit, integration, e2e) and the test environment."""
