"""The in-service Xid classes (issue 23): the table the watch and the rules share."""

import pytest

from gpuaccept.checks.xid_classes import (
    XID_CLASSES,
    XidClass,
    default_fatal_xids,
    xid_class,
    xids_of,
)
from gpuaccept.checks.xid_errors import XID_CATALOGUE


@pytest.mark.parametrize(
    ("xid", "cls"),
    [
        (48, XidClass.FATAL),
        (64, XidClass.FATAL),
        (79, XidClass.FATAL),
        (95, XidClass.FATAL),
        (140, XidClass.FATAL),
        (74, XidClass.REPEATED),
        (62, XidClass.REPEATED),
        (119, XidClass.REPEATED),
        (120, XidClass.REPEATED),
        (63, XidClass.MEMORY),
        (94, XidClass.MEMORY),
        (92, XidClass.MEMORY),
        (13, XidClass.APPLICATION),
        (31, XidClass.APPLICATION),
        (43, XidClass.APPLICATION),
        (45, XidClass.APPLICATION),
        (68, XidClass.APPLICATION),
        (109, XidClass.APPLICATION),
        (8, XidClass.UNCLASSIFIED),
        (154, XidClass.UNCLASSIFIED),
    ],
)
def test_each_xid_has_its_class(xid: int, cls: XidClass) -> None:
    assert xid_class(xid) is cls


def test_the_default_fatal_list_is_the_fatal_class() -> None:
    assert default_fatal_xids() == [48, 64, 79, 95, 140]
    assert xids_of(XidClass.APPLICATION) == [13, 31, 43, 45, 68, 109]


def test_no_application_or_memory_xid_is_fatal() -> None:
    harmless = set(xids_of(XidClass.APPLICATION)) | set(xids_of(XidClass.MEMORY))
    assert not harmless & set(default_fatal_xids())


def test_every_hardware_class_xid_is_in_the_acceptance_catalogue() -> None:
    hardware = {x for x, c in XID_CLASSES.items() if c in (XidClass.FATAL, XidClass.MEMORY)}
    assert hardware <= set(XID_CATALOGUE)
