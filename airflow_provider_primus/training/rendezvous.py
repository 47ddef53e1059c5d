"""How a job's trainers find each other: through their master's data service, not a fixed address.

A job's trainers start wherever the backend puts them (processes, pods, containers), so no trainer
knows the leader's address in advance; the leader publishes where its rendezvous store listens and
the others look it up, all under the group's generation, so a trainer of a superseded group (the
master regrouped to another count) cannot join the new one.
"""

from __future__ import annotations

from airflow_provider_primus.data.service.auth import advertised_host, bind_host
from airflow_provider_primus.data.service.dispatcher_server import DispatcherClient
from airflow_provider_primus.errors import PrimusError
from airflow_provider_primus.training.distributed import Group
from airflow_provider_primus.training.gpu import process_group_backend
from airflow_provider_primus.training.options import TrainOptions

__all__ = ["GroupSupersededError", "meet_through_master"]


class GroupSupersededError(PrimusError):
    """The master has started a newer trainer group: this trainer belongs to none any more."""


def meet_through_master(client: DispatcherClient, options: TrainOptions, device_type: str) -> Group:
    """Form the job's trainer group through the master's data service (see ``Group.meet``)."""
    gen = options.generation

    def lookup() -> str | None:
        answer = client.rendezvous(gen)
        newest = answer.get("newest")
        if newest is not None and int(newest) > gen:
            raise GroupSupersededError(f"trainer group {gen} was superseded by group {newest}")
        address: str | None = answer.get("address")
        return address

    def publish(address: str) -> None:
        client.rendezvous(gen, address)

    return Group.meet(
        options.rank,
        options.trainers,
        # In a pod the loopback default means the pod's IP; a wildcard binds everywhere and
        # publishes the pod's IP: the address the group's other pods dial.
        host=bind_host(options.host),
        advertise=advertised_host(bind_host(options.host)),
        publish=publish,
        lookup=lookup,
        backend=process_group_backend(device_type),
    )
