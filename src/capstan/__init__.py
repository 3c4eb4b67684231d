"""Capstan: GPU capacity planning, cache-aware inference routing and durable diagnostics for Kubernetes."""

__version__ = "0.1.0"
