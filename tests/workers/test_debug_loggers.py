"""`OMNISTAGE_DEBUG_LOGGERS`: the loggers a replica host logs at DEBUG whatever the root level."""

from __future__ import annotations

import logging

from workers.replica_host import log_at_debug


def test_the_named_loggers_log_at_debug_and_the_others_keep_their_level():
    named, other = logging.getLogger("debug-loggers-test.a"), logging.getLogger("debug-loggers-test.b")
    named.setLevel(logging.NOTSET)
    other.setLevel(logging.NOTSET)
    log_at_debug(" debug-loggers-test.a ,, ")
    assert named.isEnabledFor(logging.DEBUG)
    assert logging.getLogger("debug-loggers-test.a.child").isEnabledFor(logging.DEBUG)
    assert other.level == logging.NOTSET
