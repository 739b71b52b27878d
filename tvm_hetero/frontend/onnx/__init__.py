"""The ONNX importer: TVM's, with our fixes and refusals.

``registry`` holds :data:`FIXES`; the op fixes register there by family (``elementwise``,
``shape_ops``, ``sequences``, ``gather_scatter``, ``recurrent``, ``attention``);
``index_guard`` builds the run-time index checks they use; ``refusals`` and
``shape_inference`` serve ``importer``, which imports all of them and holds the entry point
:func:`import_onnx`. Importing this package registers every fix.
"""

from .importer import import_onnx
from .registry import FIXES

__all__ = ["FIXES", "import_onnx"]
