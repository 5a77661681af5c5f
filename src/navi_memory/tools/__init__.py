"""Agent tools in the function-calling shape: a spec for the model and a handler that answers
text. Built on the facades and services; ``memory.py`` hands them out.
"""

from __future__ import annotations
