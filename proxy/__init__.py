"""ctxgate's HTTP edge: the only package that imports the web framework."""

from proxy.app import create_app
from proxy.settings import Settings, load_settings

__all__ = ["Settings", "create_app", "load_settings"]
