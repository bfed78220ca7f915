"""The emulated-cluster testbed: network namespaces on a bridge, links shaped with tc (issue 5)."""

from runtime.testbed.fallback import make_launcher, suggest_scale
from runtime.testbed.netns import NetnsError
from runtime.testbed.testbed import Testbed, TestbedUnavailable, cleanup_stale

__all__ = ["NetnsError", "Testbed", "TestbedUnavailable", "cleanup_stale", "make_launcher", "suggest_scale"]
