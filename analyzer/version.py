"""The one version source (pyproject reads it; every stage may import it without importing the package API)."""

__version__ = "0.2.0"
