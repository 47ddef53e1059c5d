"""A two-tower click model, written to airflow-provider-primus's model protocol.

The job names it as ``training.model.entrypoint: "two_tower:build"``; ``build(schema, options)``
returns the module. Options: ``user_features`` (the sparse and dense columns of the user tower;
default: every column whose name starts with ``user``, and every dense column), ``tower`` (the MLP
widths of both towers, default ``[32, 16]``).
"""

from two_tower.model import TwoTower, build

__all__ = ["TwoTower", "build"]
