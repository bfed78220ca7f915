"""The emulated-cluster testbed: network namespaces on a bridge, links shaped with tc (issue 5)."""

from runtime.testbed.fallback import dilated_scales, make_launcher, suggest_dilation, suggest_scale
from runtime.testbed.netns import NetnsError
from runtime.testbed.testbed import Testbed, TestbedUnavailable, cleanup_stale

__all__ = [
    "NetnsError",
    "Testbed",
    "TestbedUnavailable",
    "cleanup_stale",
    "dilated_scales",
    "make_launcher",
    "suggest_dilation",
    "suggest_scale",
]
