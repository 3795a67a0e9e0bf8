"""The synthetic support-ticket corpus and the near-duplicate clusters that de-duplicate it."""

from __future__ import annotations

import re

import pytest
from sklearn.feature_extraction.text import CountVectorizer

from privft.data import CORPORA, DataError, MembershipSplit, NearDuplicateWarning, load_corpus
from privft.data.dedup import deduplicated_split, near_duplicate_clusters
from privft.data.pii import PII_FORMATS
from privft.data.tickets import (
    LAUNCH_PRODUCT,
    LICENCE,
    PRODUCTS,
    UNUSUAL_FIRST_NAMES,
    UNUSUAL_LAST_NAMES,
    generate_tickets,
)


@pytest.fixture(scope="module")
def month():
    return generate_tickets(seed=0, size=400)


def test_the_corpus_is_registered_seeded_and_states_its_licence(month):
    assert CORPORA["tickets"].__doc__ and "generated here" in LICENCE
    texts = [t.text for t in month]
    assert load_corpus("tickets", seed=0, size=400) == texts == [t.text for t in generate_tickets(seed=0, size=400)]
    assert load_corpus("tickets", seed=0, size=400, limit=7) == texts[:7]
    assert load_corpus("tickets", seed=1, size=400) != texts
    assert len(set(texts)) == len(texts)
    with pytest.raises(DataError, match=r"corpus 'wiki' does not take the options \['seed'\]; its options are: none"):
        load_corpus("wiki", seed=1)
    with pytest.raises(DataError, match="month='later' is not one of"):
        load_corpus("tickets", month="later")


def test_every_ticket_carries_a_customer_an_email_and_an_order(month):
    email = re.compile(r"[a-z]+\.[a-z]+\d\d@\S+")
    for ticket in month:
        first_line = ticket.text.splitlines()[0]
        assert first_line == f"From: {ticket.customer} <{ticket.email}>" and email.fullmatch(ticket.email)
        assert ticket.order in ticket.text and re.fullmatch(r"NB-\d{7}", ticket.order)
        assert ticket.month == "current" and not ticket.launch
    assert sum(any(product in t.text for product in PRODUCTS) for t in month) > 0.7 * len(month)
    phone, account = (re.compile(PII_FORMATS[kind].pattern) for kind in ("phone", "account"))
    assert sum(bool(phone.search(t.text)) for t in month) > 50
    assert sum(bool(account.search(t.text)) for t in month) > 10
    assert sum("Willow Lane" in t.text or "Maple Avenue" in t.text for t in month) > 0  # postal addresses


def test_near_duplicates_are_recorded_and_found_by_the_clusters(month):
    groups: dict[int, list[int]] = {}
    for index, ticket in enumerate(month):
        if ticket.duplicate_group is not None:
            groups.setdefault(ticket.duplicate_group, []).append(index)
    assert len(groups) == 20 and all(3 <= len(indices) <= 4 for indices in groups.values())
    for indices in groups.values():  # small edits of one long ticket, from one customer
        texts = [month[i].text for i in indices]
        assert len(set(texts)) == len(texts) and min(len(t.split()) for t in texts) > 60
        assert len({t.splitlines()[0] for t in texts}) == 1
    found = {frozenset(cluster) for cluster in near_duplicate_clusters([t.text for t in month])}
    assert {frozenset(indices) for indices in groups.values()} <= found and len(found) <= len(groups) + 1


def test_unusual_names_are_recorded_and_come_from_the_rare_lists(month):
    unusual = [t for t in month if t.unusual_name]
    assert len(unusual) >= 8 and len({t.customer for t in unusual}) <= round(0.05 * int(0.8 * 400))  # some write none
    for ticket in unusual:
        first, last = ticket.customer.split()
        assert first in UNUSUAL_FIRST_NAMES and last in UNUSUAL_LAST_NAMES and ticket.customer in ticket.text
    assert not any(t.customer.split()[0] in UNUSUAL_FIRST_NAMES for t in month if not t.unusual_name)


def test_the_next_month_launches_a_product_and_its_vocabulary_shifts(month):
    following = generate_tickets(seed=0, month="next", size=400)
    assert not {t.text for t in following} & {t.text for t in month}
    assert 0.5 < sum(t.launch for t in following) / len(following) < 0.7
    assert all(LAUNCH_PRODUCT in t.text or "Aura" in t.text for t in following if t.launch)
    assert not any("Aura" in t.text for t in month)
    vocabulary = {month_name: set(CountVectorizer(min_df=5).fit([t.text for t in tickets]).vocabulary_)
                  for month_name, tickets in (("current", month), ("next", following))}
    new_words = vocabulary["next"] - vocabulary["current"]
    assert {"aura", "launch", "firmware", "mesh"} <= new_words


def test_deduplicated_split_keeps_one_copy_per_cluster_members_first():
    base = ("From: Ann Lee <ann.lee01@gmail.com> My Nimbra Hub will not pair with the app and the light keeps "
            "blinking red after every reset I try")
    members = [base, "An unrelated ticket about a late delivery of order NB-1234567 to my address", "Third one"]
    non_members = [base + " again", "A refund question about order NB-7654321 and my bank account", "Another"]
    with pytest.warns(NearDuplicateWarning):  # the split's own check sees them too
        split = MembershipSplit.from_texts(members, non_members, [base + " please"])
    deduplicated, clusters = deduplicated_split(split)
    assert clusters == [[base, base + " again", base + " please"]]
    assert deduplicated.members == members and deduplicated.non_members == non_members[1:]
    assert deduplicated.validation == [] and deduplicated.source.endswith("near-duplicates removed")
    with pytest.raises(DataError, match="threshold=0 must be in"):
        near_duplicate_clusters(members, threshold=0)
