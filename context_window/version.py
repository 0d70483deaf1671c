"""The release this code is (read by hatch for the package metadata)."""

__version__ = "0.1.0"
