"""STAND-IN for infera's kvd client (importable, does nothing)."""
STANDIN = True
