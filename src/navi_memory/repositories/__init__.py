"""Repositories: all SQL lives here. They flush on the session they are given, never commit."""
