"""STAND-IN for infera.engine.vllm: reports its argv and environment, then exits."""
from infera._standin import main

if __name__ == "__main__":
    main("infera.engine.vllm")
