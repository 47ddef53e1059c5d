"""The informer on a real apiserver: a watch the server ends resumes where it stopped."""

from __future__ import annotations

from typing import Any

from airflow_provider_primus.kubernetes.informer import Informer
from airflow_provider_primus.kubernetes.store import KubeJobStore
from tests.kube_env import KubeEnv

DOC: dict[str, Any] = {
    "apiVersion": "primus.dev/v1alpha1",
    "kind": "PrimusJob",
    "metadata": {"name": "j"},
    "spec": {"data": "/specs/data.yaml", "backend": {"type": "kubernetes"}},
}


def test_an_informer_resumes_after_its_watch_ends(kube: KubeEnv) -> None:
    """A watch the server ends (here after 1 s) resumes from the last version: no event is lost and
    nothing is listed again."""
    store = KubeJobStore(kube.api(), kube.namespace)
    api = kube.api()
    informer = Informer(api, store.collection, watch_timeout_s=1).start()
    try:
        for i in range(3):
            record = store.create(f"j{i}", {**DOC, "metadata": {"name": f"j{i}"}})
            assert informer.wait_for(lambda objs, n=f"j{i}": n in objs, timeout_s=20)
            if i < 2:
                restarts = informer.restarts
                assert informer.wait_for(lambda _o, r=restarts: informer.restarts > r, timeout_s=20)
        store.delete("j0")
        assert informer.wait_for(lambda objs: "j0" not in objs, timeout_s=20)
        assert sorted(informer.objects) == ["j1", "j2"]
        assert informer.relists == 0 and informer.restarts >= 2
        assert record.version > 0
    finally:
        informer.stop()
