"""A synthetic conversational corpus: each support ticket (the user turn) with the agent's reply (the assistant turn).

Licence: generated here. The tickets are `privft.data.tickets`'s current month, and the replies are written by
this module from fixed phrase lists and a seeded numpy generator, offline; no third-party text is used, so the
corpus carries no licence but privft's own.

Every reply greets the customer by full name, names the order and states the canonical fix for the ticket's
product and problem (`fix_for`): a product-specific fix for pairing and warranty tickets (which always name
their product), one fix per problem for shipping, refund, billing, address and login tickets. The phrasing
around the fix varies, the fix does not, so `reply_gives_fix` can decide from its key phrases whether a
generated reply gives the right fix (task accuracy); a record carries its ticket's fix in its reply, so
`record_fix` reads the ground truth back from the record alone. Near-duplicates and unusual names are recorded on each
`ChatTicket` as on `Ticket`. Records come in trl's conversational formats: ``messages`` or
``prompt_completion`` (the prompt holds the optional system turn and the ticket, the completion the reply).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import numpy as np

from privft.data.errors import DataError
from privft.data.records import Record, turn_contents
from privft.data.tickets import MONTHS, PRODUCTS, Ticket, generate_tickets, named_product, pick

LICENCE = "generated here (privft.data.tickets_chat: synthetic, no third-party text)"
CHAT_FORMATS = ("messages", "prompt_completion")
N_CHAT_TICKETS = 2_750  # ordinary tickets by default: with the near-duplicates' copies, at least 3,026 records
REPLY_STREAM = len(MONTHS)  # the replies' random stream, beside the months' streams 0 and 1 of the same seed

Conversation = dict[str, list[dict[str, str]]]  # a record: "messages", or "prompt" and "completion"

REPLY_GREETINGS = ("Hello {name},", "Dear {name},", "Hi {name},", "Good afternoon {name},")
ACKNOWLEDGEMENTS = ("Thank you for contacting Nimbra support about order {order}.",
                    "I am sorry for the trouble with order {order}.", "I have looked up order {order} on our side.",
                    "Thanks for your patience with order {order}.")
LEAD_INS = ("Here is how we are sorting it out.", "I have checked this with our team.", "This is the fix.",
            "Good news: this one is quick to solve.")
CLOSINGS = ("Let me know if anything is still wrong.", "Reply to this email if the problem comes back.",
            "I will keep your ticket open until you confirm.", "Sorry again for the inconvenience.")
REPLY_SIGN_OFFS = ("Best regards,\n{agent}, Nimbra Support", "Kind regards,\n{agent}",
                   "Thanks,\n{agent} from Nimbra Support")
AGENTS = ("Maya", "Tomás", "Ingrid", "Kofi", "Aiko", "Rosa", "Felix", "Noor")


@dataclass(frozen=True)
class Fix:
    """A canonical fix: the sentence a reply states, and the key phrases that show a reply states it."""

    text: str
    keys: tuple[str, ...]


def _fix(marked: str) -> Fix:
    """A fix from its sentence with the key phrases in [brackets]."""
    return Fix(marked.replace("[", "").replace("]", ""), tuple(re.findall(r"\[([^]]+)]", marked)))


SHARED_FIXES: dict[str, Fix] = {  # issue: its fix, the same for every product
    "shipping": _fix("I have [reshipped it by express courier] at no cost; the new tracking link will reach you by "
                     "email within 24 hours."),
    "refund": _fix("The refund was held by our payment processor; I have [re-issued the refund] and it reaches your "
                   "account in [3 to 5 working days]."),
    "billing": _fix("The second charge is [a pending authorisation], not a payment; it [drops off your card within 7 "
                    "days] without you doing anything."),
    "address": _fix("I have [changed the delivery address] on the order, and the courier will [text you a new "
                    "delivery slot]."),
    "login": _fix("Please reset your password at [account.nimbra.example], as the link in the app is broken this "
                  "week; a locked account [unlocks after 30 minutes]."),
}
DEVICE_FIXES: dict[str, dict[str, Fix]] = {  # issue: {product: its fix}
    "pairing": {
        "Nimbra Hub": _fix("Hold the [pinhole] button on the base for [10 seconds] until the light turns white, then "
                           "re-pair the Hub from the Nimbra app."),
        "Nimbra Cam": _fix("Hold the button [beside the lens] for [15 seconds] until the camera chimes, then re-pair "
                           "it from the Nimbra app."),
        "Nimbra Doorbell": _fix("Take off the faceplate and press the [orange button] [4 times] quickly, then "
                                "re-pair the Doorbell from the Nimbra app."),
        "Nimbra Plug": _fix("Hold the [power button on the side] for [5 seconds] until it blinks green, then re-pair "
                            "the Plug from the Nimbra app."),
        "Nimbra Thermostat": _fix("Press [the dial] in for [12 seconds] until the screen shows RESET, then re-pair "
                                  "the Thermostat from the Nimbra app."),
        "Nimbra Bulb": _fix("Switch the bulb [off and on 6 times] at the wall, one second apart, then re-pair it "
                            "from the Nimbra app."),
        "Nimbra Sensor": _fix("Hold the button under the [battery cover] for [8 seconds] until it beeps twice, then "
                              "re-pair the Sensor from the Nimbra app."),
    },
    "warranty": {
        "Nimbra Hub": _fix("We are sending you a new Hub under the warranty; once it arrives, move your devices "
                           "across with Settings > [Transfer hub] in the app."),
        "Nimbra Cam": _fix("We are sending you a new Cam under the warranty; [keep the memory card] and put it in the "
                           "new one, so your recordings move across."),
        "Nimbra Doorbell": _fix("A replacement Doorbell is on its way under the warranty; switch off the doorbell's "
                                "[breaker] before you take the old one off the wall."),
        "Nimbra Plug": _fix("Unplug it and stop using it; [any Nimbra stockist] will [exchange it] on the spot under "
                            "the warranty when you show this email."),
        "Nimbra Thermostat": _fix("Set your boiler to [manual mode] for now; a [Nimbra engineer] will fit the "
                                  "replacement under the warranty within 3 working days."),
        "Nimbra Bulb": _fix("We do not need the bulb back: [photograph its base], upload the photo under Warranty in "
                            "the app, and a new bulb ships free."),
        "Nimbra Sensor": _fix("Fit a new [CR2 battery] first; if the Sensor stays dead, send it back in the [prepaid "
                              "envelope] for a replacement under the warranty."),
    },
}
ALL_FIXES: tuple[Fix, ...] = (*SHARED_FIXES.values(),
                              *(fix for fixes in DEVICE_FIXES.values() for fix in fixes.values()))


def fix_for(issue: str, product: str | None = None) -> Fix:
    """The canonical fix for a ticket's issue (a key of `tickets.ISSUES`) and product (needed for device issues)."""
    if issue in SHARED_FIXES:
        return SHARED_FIXES[issue]
    if issue not in DEVICE_FIXES or product not in DEVICE_FIXES[issue]:
        raise DataError(f"tickets-chat: no fix for issue={issue!r} with product={product!r}; issues are "
                        f"{sorted([*SHARED_FIXES, *DEVICE_FIXES])}, and {sorted(DEVICE_FIXES)} need a product of "
                        f"{sorted(PRODUCTS)}")
    return DEVICE_FIXES[issue][product]


def reply_gives_fix(reply: str, fix: Fix) -> bool:
    """Whether `reply` states `fix` and no other fix: all of a fix's key phrases, as whole words, case-insensitive."""
    text = " ".join(reply.lower().split())
    return _states(text, fix) and not any(_states(text, other) for other in ALL_FIXES if other != fix)


def record_fix(record: Record) -> Fix:
    """The ground-truth fix of a tickets-chat record: the canonical fix whose sentence its recorded reply holds.

    The generator writes each reply around its ticket's `ChatTicket.fix` sentence, verbatim, in either format and
    with or without a system turn; a record of another corpus holds none and is refused.
    """
    reply = " ".join(turn_contents(record, roles=("assistant",)))
    found = [fix for fix in ALL_FIXES if fix.text in reply]
    if len(found) != 1:
        raise DataError(f"tickets-chat: the reply {reply[:60]!r}... states {len(found)} canonical fixes, not one, so "
                        "it has no ground truth to score a generated reply against; task accuracy reads tickets-chat "
                        "records (data.corpus: tickets-chat, or a file of its records, replies unchanged)")
    return found[0]


def _states(text: str, fix: Fix) -> bool:
    """Whether the lowercased, space-collapsed `text` holds every key phrase of `fix`."""
    return all(re.search(rf"(?<!\w){re.escape(key.lower())}(?!\w)", text) for key in fix.keys)


@dataclass(frozen=True, kw_only=True)
class ChatTicket(Ticket):
    """A ticket (`text`, the user turn) with the agent's reply and the fix it states: ground truth for the corpus."""

    product: str | None  # the product the ticket names; None for a billing, address or login ticket that names none
    fix: Fix
    reply: str

    def record(self, format: str = "messages", system: str | None = None) -> Conversation:
        """The conversation in trl's `format` ("messages" or "prompt_completion"), after a `system` turn if given."""
        _check_options(format, system)
        system_turn = [] if system is None else [{"role": "system", "content": system}]
        prompt = [*system_turn, {"role": "user", "content": self.text}]
        completion = [{"role": "assistant", "content": self.reply}]
        if format == "messages":
            return {"messages": prompt + completion}
        return {"prompt": prompt, "completion": completion}


def tickets_chat(limit: int | None = None, *, seed: int = 0, size: int | None = None, format: str = "messages",
                 system: str | None = None) -> list[Conversation]:
    """Synthetic support conversations (licence: generated here), seeded; see `generate_chat_tickets`."""
    _check_options(format, system)
    return [ticket.record(format, system) for ticket in generate_chat_tickets(seed=seed, size=size)[:limit]]


def generate_chat_tickets(*, seed: int = 0, size: int | None = None) -> list[ChatTicket]:
    """The current month's tickets, each with its reply; the same seed gives the same conversations.

    The tickets are `generate_tickets(seed=seed, month="current", size=size)`'s (default `N_CHAT_TICKETS` ordinary
    tickets, plus the near-duplicates' copies); the replies come from a stream of their own of the same seed.
    Take them whole (`size`), not cut (`limit`), to keep the near-duplicate groups.
    """
    tickets = generate_tickets(seed=seed, month="current", size=N_CHAT_TICKETS if size is None else size)
    rng = np.random.default_rng([seed, REPLY_STREAM])
    return [_chat_ticket(ticket, rng) for ticket in tickets]


def _chat_ticket(ticket: Ticket, rng: np.random.Generator) -> ChatTicket:
    """`ticket` with its product, its fix and a reply drawn by `rng`."""
    product = named_product(ticket.text)
    fix = fix_for(ticket.issue, product)
    return ChatTicket(**asdict(ticket), product=product, fix=fix, reply=_reply(rng, ticket, fix))


def _reply(rng: np.random.Generator, ticket: Ticket, fix: Fix) -> str:
    """The agent's reply: a greeting with the customer's name, the order, a lead-in, the fix, a closing, a sign-off."""
    greeting = pick(rng, REPLY_GREETINGS).format(name=ticket.customer)
    acknowledgement = pick(rng, ACKNOWLEDGEMENTS).format(order=ticket.order)
    body = " ".join([acknowledgement, pick(rng, LEAD_INS), fix.text, pick(rng, CLOSINGS)])
    return "\n".join([greeting, body, pick(rng, REPLY_SIGN_OFFS).format(agent=pick(rng, AGENTS))])


def _check_options(format: str, system: str | None) -> None:
    """Refuse a format trl's conversational formats do not name, and an empty system turn."""
    if format not in CHAT_FORMATS:
        raise DataError(f"tickets-chat: format={format!r} is not one of {CHAT_FORMATS}")
    if system is not None and not (isinstance(system, str) and system.strip()):
        raise DataError(f"tickets-chat: system={system!r} must be a non-empty string, or None for no system turn")
