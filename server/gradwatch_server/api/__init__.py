"""The HTTP layer: dependencies and one router module per resource."""
