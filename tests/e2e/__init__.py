"""End-to-end tests: the chart installed with real helm, driven with real kubectl."""
