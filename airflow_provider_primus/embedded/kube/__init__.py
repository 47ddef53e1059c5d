"""A real Kubernetes control plane on loopback, without Docker, for tests and benchmarks.

etcd, kube-apiserver and kube-scheduler of one pinned release are built from source with Go (once,
into the provider's cache), and kwok simulates the nodes and the pods' lifecycles, so the backend code
talks to the same API server, admission chain, RBAC and scheduler as in production.
"""
