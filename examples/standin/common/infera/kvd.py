"""STAND-IN for infera.kvd (the KV-cache daemon sidecar): reports its argv and environment, then exits."""
from infera._standin import main

if __name__ == "__main__":
    main("infera.kvd")
