"""Facades: what Memory hands out. Each validates input, embeds (through a service), opens the
unit of work and calls a service; it returns schemas, and never imports a repository, a model
or another facade."""
