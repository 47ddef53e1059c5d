"""The partition sensor tests reuse the trigger tests' lake."""

from tests.triggers.conftest import lake

__all__ = ["lake"]
