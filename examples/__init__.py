"""Runnable examples of navi-memory in use; the tests import and run them."""
