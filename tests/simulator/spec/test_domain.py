"""A domain's name is written by domain_name and read back by domain_splits/split_domain only."""

from __future__ import annotations

import pytest

from simulator.spec import domain_name, domain_splits, split_domain


def test_a_name_reads_back_as_written() -> None:
    assert domain_name("VGG16", "A2") == "VGG16__A2"
    assert split_domain(domain_name("NCF-dense", "B9")) == ("NCF-dense", "B9")
    assert list(domain_splits("VGG16__A2")) == [("VGG16", "A2")]


def test_names_with_the_separator_have_every_reading_leftmost_first() -> None:
    assert list(domain_splits("a__b__c")) == [("a", "b__c"), ("a__b", "c")]
    assert split_domain("a__b__c") == ("a", "b__c")
    assert list(domain_splits("a____b")) == [("a", "__b"), ("a_", "_b"), ("a__", "b")]
    assert list(domain_splits("__a__")) == []


@pytest.mark.parametrize("bad", ["VGG16", "", "__A2", "VGG16__", "__"])
def test_a_name_without_a_reading_is_refused_by_name(bad: str) -> None:
    with pytest.raises(ValueError, match=f"domain {bad!r} is not"):
        split_domain(bad)
