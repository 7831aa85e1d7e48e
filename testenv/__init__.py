"""The test environment: a real Kubernetes control plane built from source, and a process
kubelet."""
