"""autotune: finds the best vLLM speculative-decoding setting per (model, workload).

Importing the package is cheap on purpose: vllm, ray, optuna, sqlalchemy and pandas are
imported by the subpackage that needs them, when it needs them.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
