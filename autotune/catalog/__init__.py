"""Data shipped with autotune: the model catalog (models.yaml) and published results (published.yaml)."""
