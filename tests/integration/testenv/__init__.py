"""Tests of the test bed itself (the process kubelet, the control plane, real clients): the
harness every product test stands on, kept apart from the tests of kuzk."""
