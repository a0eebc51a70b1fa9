"""The package version (a leaf module, so that every stage can name its producer)."""

__version__ = "0.1.0"
