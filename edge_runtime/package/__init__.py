"""Model packages: a manifest plus one or more variants of the same model."""
