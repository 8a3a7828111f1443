"""Fake provider APIs (real HTTP on loopback, each provider's wire format) for tests and demos.

Only the test suite, the benchmarks and `python -m service demo --workspace` import this
package; the running service never does (tests/unit/test_architecture.py checks it).
"""
