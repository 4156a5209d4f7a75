"""Request and response models of the HTTP API, one module per resource (kept apart from the table models)."""
