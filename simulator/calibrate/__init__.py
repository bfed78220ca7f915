"""Cluster calibration from the user's own measurements (issue 15): nccl-tests output -> α, β per link.

Public API:
    load_nccl_tests(path) / parse_nccl_tests(text, path) -> NcclResult   one nccl-tests output
    fit_links(results) -> {(scope, collective): LinkFit}                  α (us), β (GB/s) by least squares
    calibrated_cluster(cluster, fits) -> ClusterSpec                      the cluster the cost model uses
"""

from simulator.calibrate.nccl import (
    PREFERENCE,
    LinkFit,
    NcclParseError,
    NcclResult,
    NcclRow,
    bus_factor,
    calibrated_cluster,
    fit_link,
    fit_links,
    link_for,
    load_nccl_tests,
    parse_nccl_tests,
)

__all__ = [
    "PREFERENCE",
    "LinkFit",
    "NcclParseError",
    "NcclResult",
    "NcclRow",
    "bus_factor",
    "calibrated_cluster",
    "fit_link",
    "fit_links",
    "link_for",
    "load_nccl_tests",
    "parse_nccl_tests",
]
