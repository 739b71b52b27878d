"""Helpers the tests share: plain functions (fixtures are in ``tests/conftest.py``)."""
