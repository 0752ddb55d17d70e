"""sweetspot: find the best launch configuration of a vLLM deployment."""

from sweetspot._errors import SweetspotError

__all__ = ["SweetspotError", "__version__"]

__version__ = "0.1.0"
