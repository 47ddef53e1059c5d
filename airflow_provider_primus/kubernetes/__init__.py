"""The Kubernetes backend: a job is a PrimusJob custom resource, its executors are pods.

``client`` (JSON over the ApiClient, retries) and ``informer`` (list + watch cache) talk to the
apiserver; ``store`` is the job store and ``pods`` the executor backend, behind the same interfaces
as the local ones (``master/store.py:JobStore``, ``resources/backend.py:Backend``); ``manifests``
builds the objects (RBAC, driver pod, documents), ``install`` applies them, ``submission`` runs a
job's master on a cluster.
"""
