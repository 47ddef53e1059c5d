"""A Kerberized YARN cluster (Hadoop's MiniKdc + the mini cluster in secure mode): the backend
authenticates with SPNEGO from a principal and keytab, submits with an HDFS delegation token, and the
executors in their containers read ``hdfs://`` and write checkpoints there with that token alone."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow.fs as pafs
import pytest
import yaml

from airflow_provider_primus.contracts.job import YarnBackend as YarnSettings
from airflow_provider_primus.data.sources.files import open_filesystem
from airflow_provider_primus.embedded.yarn import MiniYarnCluster, start
from airflow_provider_primus.embedded.yarn.build import MiniClusterBuild
from airflow_provider_primus.hadoop import kerberos as kerberos_module
from airflow_provider_primus.hadoop.config import load_conf
from airflow_provider_primus.hadoop.kerberos import KerberosLogin, SpnegoAuth
from airflow_provider_primus.master.jobs import submit
from airflow_provider_primus.yarn.application import YarnUnsupportedError, client_identity
from airflow_provider_primus.yarn.rest import ResourceManager
from tests.master.conftest import JobWorld
from tests.master.test_master import assert_exactly_once, ended, executor
from tests.yarn.test_job import YARN_JOB, container_process, running, until

pytestmark = [pytest.mark.yarn, pytest.mark.timeout(600)]
pytest.importorskip("gssapi", reason="the kerberos extra (gssapi) is not installed")

USER = "alice"  # the client principal: not the OS user, so whose identity reaches HDFS shows


@pytest.fixture(scope="module")
def secure_cluster(
    yarn_build: MiniClusterBuild, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MiniYarnCluster]:
    cluster = start(
        tmp_path_factory.mktemp("yarn-kerberos"), kerberos=True, kerberos_user=USER, build=yarn_build
    )
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def kerberos(
    secure_cluster: MiniYarnCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> dict[str, str]:
    """The cluster's client settings; no ticket cache of anyone's (a private, empty one)."""
    facts = secure_cluster.kerberos
    assert facts is not None
    monkeypatch.setenv("KRB5_CONFIG", facts["krb5_conf"])
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path / 'no-cache'}")
    monkeypatch.setenv("HADOOP_CONF_DIR", str(secure_cluster.conf_dir))
    # The master exports its login for the process's hdfs:// access: restored after the test.
    monkeypatch.setenv("PRIMUS_KERBEROS_PRINCIPAL", "")
    monkeypatch.setenv("PRIMUS_KERBEROS_KEYTAB", "")
    return facts


def test_the_cluster_refuses_simple_authentication_and_answers_spnego(
    secure_cluster: MiniYarnCluster, kerberos: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert secure_cluster.webhdfs_url is not None
    apps = f"{secure_cluster.rm_url}/ws/v1/cluster/apps"
    listing = f"{secure_cluster.webhdfs_url}/webhdfs/v1/user?op=LISTSTATUS"
    # Really Kerberized: a user name is not an identity, on the ResourceManager or on WebHDFS.
    assert httpx.get(apps, params={"user.name": USER}).status_code == 401
    assert httpx.get(listing + f"&user.name={USER}").status_code == 401
    auth = SpnegoAuth(KerberosLogin(kerberos["principal"], kerberos["keytab"]))
    assert httpx.get(apps, auth=auth).status_code == 200
    # Tickets about to expire are fetched again from the keytab before the next request.
    first = auth._negotiator._creds
    relogin_s = kerberos_module.RELOGIN_S
    monkeypatch.setattr(kerberos_module, "RELOGIN_S", 10**9)
    assert httpx.get(apps, auth=auth).status_code == 200
    assert auth._negotiator._creds is not first
    monkeypatch.setattr(kerberos_module, "RELOGIN_S", relogin_s)
    homes = httpx.get(listing, auth=auth).json()["FileStatuses"]["FileStatus"]
    assert {(h["pathSuffix"], h["owner"]) for h in homes} >= {(USER, USER)}

    conf = load_conf(secure_cluster.conf_dir)
    assert conf.kerberos and conf.rm_principal and conf.rm_principal.startswith("primus/")
    login = {"principal": kerberos["principal"], "keytab": kerberos["keytab"]}
    # No credentials anywhere: refused before any request, saying where they were looked for.
    with pytest.raises(YarnUnsupportedError, match=r"no Kerberos credentials .*kinit"):
        client_identity(conf, YarnSettings())
    with pytest.raises(YarnUnsupportedError, match=r"keytab /nowhere does not exist"):
        client_identity(conf, YarnSettings(principal=kerberos["principal"], keytab="/nowhere"))
    with pytest.raises(YarnUnsupportedError, match=r"not the Kerberos principal's user 'alice'"):
        client_identity(conf, YarnSettings(user="bob", **login))
    user, found = client_identity(conf, YarnSettings(**login))
    assert user == USER and isinstance(found, SpnegoAuth)
    rm = ResourceManager(secure_cluster.rm_url, user, auth=found)
    assert rm.info()["state"] == "STARTED"
    rm.close()


def test_a_job_reads_hdfs_and_checkpoints_there_with_the_applications_token(
    yarn_world: JobWorld, secure_cluster: MiniYarnCluster, kerberos: dict[str, str]
) -> None:
    settings = {"principal": kerberos["principal"], "keytab": kerberos["keytab"]}
    KerberosLogin(**settings).export()  # this test's own hdfs:// copies, as the principal
    base = f"{secure_cluster.fs_default}/user/{USER}/primus-tests/{uuid.uuid4().hex}"
    fs, root = open_filesystem(base)
    pafs.copy_files(str(yarn_world.root / "store"), f"{root}/store", destination_filesystem=fs)
    data = yaml.safe_load(yarn_world.data_path.read_text())
    data["spec"]["sources"][0]["uri"] = f"{base}/store"
    yarn_world.data_path.write_text(yaml.safe_dump(data))
    training = yaml.safe_load(yarn_world.training_path.read_text())
    training["spec"]["checkpoint"]["dir"] = f"{base}/ckpt"
    yarn_world.training_path.write_text(yaml.safe_dump(training))
    yarn = {"am_memory": "256Mi", "conf_dir": str(secure_cluster.conf_dir), **settings}
    submit(yarn_world.job(**{**YARN_JOB, "backend": {"type": "yarn", "yarn": yarn}}), store=yarn_world.store)
    with running(yarn_world) as master:
        serving = until(yarn_world, lambda r: ((r.status.get("progress") or {}).get("trainer_step") or 0) > 0)
        app = master.backend.session.rm.app(master.backend.session.app_id or "")
        # The containers hold the application's token, never the user's keytab or Kerberos settings.
        environ = container_process(executor(serving, "data-0")["handle"]["ref"]["container"]).environ()
        assert Path(environ["PRIMUS_HDFS_TOKEN_FILE"]).is_file()
        assert not {"PRIMUS_KERBEROS_KEYTAB", "KRB5_CLIENT_KTNAME", "KRB5CCNAME"} & set(environ)
        record = until(yarn_world, ended)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    assert app["user"] == USER  # the principal's identity, not the OS user's
    assert_exactly_once(yarn_world)
    manifests = [
        i.base_name
        for i in fs.get_file_info(pafs.FileSelector(f"{root}/ckpt"))
        if i.base_name.endswith(".json")
    ]
    assert manifests, "no checkpoint was committed on HDFS"
    # Nothing of the token or keytab in the job's status or events.
    secret = Path(kerberos["keytab"]).name
    text = json.dumps(record.status) + json.dumps([e.message for e in yarn_world.store.events("job")])
    assert secret not in text and "urlString" not in text
