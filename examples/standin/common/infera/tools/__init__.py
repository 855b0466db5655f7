"""STAND-IN for infera's tools package."""
