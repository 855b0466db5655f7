"""STAND-IN for infera's real Python package (test and example material only).

The real infera payload is not part of this repository. These modules only report
what the launcher handed them, so tests and the quickstart can check the exec.
"""
