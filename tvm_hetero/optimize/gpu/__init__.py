"""The GPU column of the optimization table: dlight's rules where they are right, and the
package's own GPU rules (one per file) where dlight's are not."""

from .dlight import GPU_RULE_NAMES, DlightRule
from .rules import gpu_rules

__all__ = ["GPU_RULE_NAMES", "DlightRule", "gpu_rules"]
