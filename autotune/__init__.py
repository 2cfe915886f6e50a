"""autotune: finds the best vLLM speculative-decoding setting per (model, workload).

Importing the package is cheap on purpose: vllm, ray, optuna, sqlalchemy and pandas are
imported by the subpackage that needs them, when it needs them.
"""

__version__ = "0.2.0"

DEFAULT_DB = "sqlite:///studies/autotune.db"
"""The study store when neither ``--db`` nor ``AUTOTUNE_DB`` names one (here so that the CLI can
tell a store that does not exist yet without importing SQLAlchemy)."""

__all__ = ["DEFAULT_DB", "__version__"]
