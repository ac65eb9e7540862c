"""Exercise checks (filled in by its notebook's issue)."""

__all__: list[str] = []
