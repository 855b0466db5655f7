"""STAND-IN for Mooncake's Python package (importable, does nothing)."""
STANDIN = True
