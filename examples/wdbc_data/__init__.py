"""The Wisconsin Diagnostic Breast Cancer data set as arrays, for ``data.dataset: wdbc_data:load``."""

from .loader import load

__all__ = ["load"]
