"""STAND-IN for the hipFile Python bindings (importable, does nothing)."""
STANDIN = True
