"""The connector and the shared pipeline every source feeds (see connector.py)."""

from floeline.ingest.connector import Connector

__all__ = ["Connector"]
