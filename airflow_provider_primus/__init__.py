"""Apache Airflow provider for Primus-style recommendation training.

Importing the package must stay cheap (Airflow imports every provider's info at start-up), so this
module only carries the version.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
