"""STAND-IN for infera.tools.preflight: reports its argv and environment, then exits."""
from infera._standin import main

if __name__ == "__main__":
    main("infera.tools.preflight")
