"""Managed local servers: start, wait until ready, stop, never leave orphans."""

from storebench.servers.base import Server, ServerError, free_port

__all__ = ["Server", "ServerError", "free_port"]
