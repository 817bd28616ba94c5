"""An ack or nack that comes after its lease ran out says so (issue 43 item 20).

Before, it said only "record N of queue q is not in flight", the same as a second ack. The
owner remembers the receipts of the latest few thousand expired deliveries (bounded), so the
error names the expired lease, from the owner's own store and through a client alike; an ack
it cannot place lists what may have happened.
"""

from __future__ import annotations

import time

import pytest
import tflux


def expired_delivery(store: tflux.Store) -> tflux.Record:
    store.create_queue("q", exist_ok=True)
    store.enqueue("q", 0, b"slow work")
    rec = store.dequeue("q", timeout=0, lease=0.05)
    assert rec is not None
    time.sleep(0.15)
    return rec


@pytest.mark.parametrize("settle", ["ack", "nack"])
def test_a_late_ack_or_nack_says_the_lease_expired(tmp_path, settle):
    with tflux.open(tmp_path / "base") as store:
        rec = expired_delivery(store)
        with pytest.raises(tflux.NotInFlightError, match="its lease expired before this"):
            getattr(store, settle)(rec)
        again = store.dequeue("q", timeout=0)
        assert again == rec  # it went back to its queue
        store.ack(again)


def test_a_late_ack_through_a_client_says_the_lease_expired(tmp_path):
    base = tmp_path / "base"
    with tflux.open(base) as owner, tflux.open(base) as client:
        assert owner.is_owner and not client.is_owner
        rec = expired_delivery(client)
        with pytest.raises(tflux.NotInFlightError, match="its lease expired before this"):
            client.ack(rec)


def test_a_second_ack_does_not_blame_a_lease(tmp_path):
    with tflux.open(tmp_path / "base") as store:
        store.create_queue("q")
        store.enqueue("q", 0, b"x")
        rec = store.dequeue("q", timeout=0, lease=3600)
        store.ack(rec)
        with pytest.raises(tflux.NotInFlightError) as err:
            store.ack(rec)
        assert "acked or nacked already" in str(err.value)
        assert "expired before" not in str(err.value)
