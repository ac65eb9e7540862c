"""The models, solved (notebook 07)."""
