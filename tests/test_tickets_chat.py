"""The synthetic support conversations (tickets-chat) and their ground truth for task accuracy."""

from __future__ import annotations

import pytest

from privft.data import CORPORA, DataError, load_corpus
from privft.data.tickets import PRODUCTS, UNUSUAL_FIRST_NAMES, generate_tickets
from privft.data.tickets_chat import (
    ALL_FIXES,
    DEVICE_FIXES,
    LICENCE,
    SHARED_FIXES,
    fix_for,
    generate_chat_tickets,
    reply_gives_fix,
)

SYSTEM = "You are Nimbra's support agent."


@pytest.fixture(scope="module")
def chats():
    return generate_chat_tickets(seed=0, size=400)


def test_the_corpus_is_registered_seeded_and_states_its_licence(chats):
    assert CORPORA["tickets-chat"].__doc__ and "generated here" in LICENCE
    records = load_corpus("tickets-chat", seed=0, size=400)
    assert records == [ticket.record() for ticket in chats] == [t.record() for t in generate_chat_tickets(size=400)]
    assert load_corpus("tickets-chat", seed=0, size=400, limit=7) == records[:7]
    assert load_corpus("tickets-chat", seed=1, size=400) != records
    assert [t.text for t in chats] == [t.text for t in generate_tickets(seed=0, size=400)]  # the tickets corpus's
    with pytest.raises(DataError, match="format='text' is not one of"):
        load_corpus("tickets-chat", size=10, format="text")
    with pytest.raises(DataError, match="system='' must be a non-empty string"):
        load_corpus("tickets-chat", size=10, system="")
    with pytest.raises(DataError, match="its options are: seed, size, format, system"):
        load_corpus("tickets-chat", month="next")


def test_the_default_size_holds_3000_distinct_conversations():
    records = load_corpus("tickets-chat")
    assert len(records) >= 3000 and len({str(record) for record in records}) == len(records)
    assert len({record["messages"][0]["content"] for record in records}) == len(records)  # distinct tickets too
    assert len({record["messages"][1]["content"] for record in records}) == len(records)  # and distinct replies


def test_both_trl_formats_with_and_without_a_system_turn(chats):
    ticket = chats[0]
    user, assistant = {"role": "user", "content": ticket.text}, {"role": "assistant", "content": ticket.reply}
    system = {"role": "system", "content": SYSTEM}
    assert ticket.record() == {"messages": [user, assistant]}
    assert ticket.record(system=SYSTEM) == {"messages": [system, user, assistant]}
    assert ticket.record("prompt_completion") == {"prompt": [user], "completion": [assistant]}
    assert ticket.record("prompt_completion", SYSTEM) == {"prompt": [system, user], "completion": [assistant]}
    records = load_corpus("tickets-chat", size=400, format="prompt_completion", system=SYSTEM)
    assert records == [t.record("prompt_completion", SYSTEM) for t in chats]
    for record in records:
        assert all(turn["content"].strip() for turn in record["prompt"] + record["completion"])


def test_every_reply_names_the_customer_and_the_order_and_states_the_fix(chats):
    for ticket in chats:
        assert ticket.customer in ticket.reply and ticket.order in ticket.reply and ticket.fix.text in ticket.reply
        assert ticket.customer in ticket.text and ticket.email in ticket.text and ticket.order in ticket.text
        assert ticket.product is None or ticket.product in ticket.text
        assert ticket.fix == fix_for(ticket.issue, ticket.product)
    device = [t for t in chats if t.issue in DEVICE_FIXES]
    assert device and all(t.product in PRODUCTS for t in device)  # pairing and warranty tickets name the product
    assert len({t.fix for t in device}) == 2 * len(PRODUCTS) and len({t.fix for t in chats}) == len(ALL_FIXES)


def test_near_duplicates_and_unusual_names_are_recorded(chats):
    groups: dict[int, list] = {}
    for ticket in chats:
        if ticket.duplicate_group is not None:
            groups.setdefault(ticket.duplicate_group, []).append(ticket)
    assert len(groups) == 20 and all(3 <= len(group) <= 4 for group in groups.values())
    for group in groups.values():  # one customer's edited copies of one ticket: the same fix, varied replies
        assert len({(t.customer, t.order, t.fix) for t in group}) == 1 and len({t.text for t in group}) == len(group)
    unusual = [t for t in chats if t.unusual_name]
    assert len(unusual) >= 8 and all(t.customer.split()[0] in UNUSUAL_FIRST_NAMES for t in unusual)
    assert all(t.customer in t.reply for t in unusual)


def test_the_fix_checker_accepts_the_right_fix_only(chats):
    assert all(reply_gives_fix(ticket.reply, ticket.fix) for ticket in chats)
    for fix in ALL_FIXES:  # every fix is told apart from every other one
        assert [other for other in ALL_FIXES if reply_gives_fix(fix.text, other)] == [fix]
    ticket = next(t for t in chats if t.issue == "pairing")
    other_issue = SHARED_FIXES["shipping"]
    other_product = next(f for p, f in DEVICE_FIXES["pairing"].items() if p != ticket.product)
    for wrong in (other_issue, other_product):
        assert not reply_gives_fix(ticket.reply.replace(ticket.fix.text, wrong.text), ticket.fix)
        assert not reply_gives_fix(f"{ticket.reply} {wrong.text}", ticket.fix)  # two fixes are not the fix
    assert reply_gives_fix(" ".join(ticket.reply.upper().split()), ticket.fix)  # case and spacing do not matter
    assert not reply_gives_fix(f"Dear {ticket.customer}, we are looking into order {ticket.order}.", ticket.fix)
    with pytest.raises(DataError, match="no fix for issue='pairing' with product=None"):
        fix_for("pairing")
