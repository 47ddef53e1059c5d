"""The old name of :mod:`airflow_provider_primus.contracts`, kept importable for one release.

Code written against ``airflow_provider_primus.spec`` (a DAG file, a model package, a script) keeps
working and is told where the module moved; every submodule is the very module object of its new
home, so ``isinstance`` checks and ``SpecError`` handlers see the same classes.
"""

import importlib
import pkgutil
import sys
import warnings

from airflow_provider_primus import contracts
from airflow_provider_primus.contracts import *  # noqa: F403 (the old name's whole surface)
from airflow_provider_primus.contracts import __all__  # noqa: F401

warnings.warn(
    "airflow_provider_primus.spec is now airflow_provider_primus.contracts; the old name goes away "
    "in the next release",
    DeprecationWarning,
    stacklevel=2,
)

for _info in pkgutil.iter_modules(contracts.__path__):
    sys.modules[f"{__name__}.{_info.name}"] = importlib.import_module(f"{contracts.__name__}.{_info.name}")
