"""A synthetic support-ticket corpus: a month of tickets about a fictional smart-home line, and the next month's.

Licence: generated here. Every ticket is written by this module from fixed phrase lists and seeded numpy
generators, offline; no third-party text is used, so the corpus carries no licence but privft's own.

The current month ("current") holds ordinary tickets about the Nimbra product line, each with a customer's
name, email address and order number, many with a postal address, phone number, card digits or bank account
(the generators of `privft.data.pii`). Two kinds of ticket are planted and recorded, so that an audit can
check whether they are the most exposed:

- near-duplicates: long tickets that the same customer sent again with small edits (a changed greeting, a
  follow-up line), `Ticket.duplicate_group` naming the group;
- unusual names: customers whose names come from a list of rare first names and surnames
  (`Ticket.unusual_name`).

The next month ("next") is written by the same generators but in a month when the Nimbra Aura launched:
most of its tickets are about the launch (pre-orders, the bundle code, firmware 6.0, mesh pairing), so its
vocabulary shifts, as seed 000's walk-through needs for a non-random split to be caught.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from privft.data.errors import DataError
from privft.data.pii import PII_FORMATS, email_for

LICENCE = "generated here (privft.data.tickets: synthetic, no third-party text)"
MONTHS = ("current", "next")
N_TICKETS = {"current": 1200, "next": 600}  # ordinary tickets per month, before the near-duplicates' copies
MAX_SIZE = 10_000
NEAR_DUPLICATE_SHARE = 0.05  # of the current month's tickets, sent again 2 or 3 times with small edits
UNUSUAL_NAME_SHARE = 0.05  # of customers
LAUNCH_SHARE = 0.6  # of the next month's tickets are about the launch

PRODUCTS = {"Nimbra Hub": "89.00", "Nimbra Cam": "129.00", "Nimbra Doorbell": "149.00", "Nimbra Plug": "24.99",
            "Nimbra Thermostat": "179.00", "Nimbra Bulb": "14.99", "Nimbra Sensor": "34.50"}
LAUNCH_PRODUCT, LAUNCH_PRICE = "Nimbra Aura", "249.00"
UNUSUAL_FIRST_NAMES = (
    "Zebulon", "Ottoline", "Thaddeus", "Xiomara", "Peregrine", "Eulalie", "Bartholomew", "Ysolde", "Cosimo",
    "Leocadia", "Ignatius", "Oluwaseun", "Anastasios", "Seraphina", "Evander", "Tancredi", "Wilhelmina",
    "Lysander", "Bronisława", "Aurelio", "Hyacinth", "Radomir", "Ximena", "Caedmon", "Zenobia",
)
UNUSUAL_LAST_NAMES = (
    "Quackenbush", "Vanderzee", "Oyelaran-Fitzwilliam", "Bjørnstad", "Featherstonehaugh", "Szczepańska",
    "Thistlewood", "Abernathy-Rourke", "Papadopoulou", "Ravenscroft", "Krzyżanowski", "Mbeki-Larsson",
    "Higginbotham", "Dragomirescu", "Okonkwo-Baptiste", "Vasquez-Tenorio", "Nakagawa-Pryce", "Wojciechowski",
    "Ashburnham", "Zarzycki-Holm",
)
STREETS = ("Willow Lane", "Maple Avenue", "Harbour Road", "Station Street", "Cedar Court", "Orchard Way",
           "Mill Road", "Elm Street", "Bridge Street", "Park Crescent", "Church Lane", "Kingsway")
CITIES = ("Brookfield, OH 44403", "Fairview, OR 97024", "Riverton, WY 82501", "Greenville, SC 29601",
          "Springdale, AR 72764", "Ashland, KY 41101", "Milford, CT 06460", "Salem, MA 01970",
          "Georgetown, TX 78626", "Clayton, NC 27520")

GREETINGS = ("Hi,", "Hello,", "Dear Nimbra support,", "Hi team,", "Good morning,", "Hello there,")
SIGN_OFFS = ("Thanks, {first}", "Best regards, {name}", "Thank you, {name}", "Cheers, {first}", "Kind regards, {name}")
CONTACT_LINES = ("You can reach me at {phone}.", "My phone number is {phone} if a call is easier.",
                 "Please call me on {phone} after 5pm.")
ORDER_LINES = ("My order number is {order}.", "The order was {order}.", "(Order {order}.)")
ADDRESS_LINES = ("My address is {address}.", "Delivery address: {address}.", "I live at {address}.")
ISSUES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {  # issue: (subjects, bodies)
    "shipping": (
        ("Where is my order?", "Order {order} not delivered", "Late delivery"),
        ("My order {order} for a {product} was supposed to arrive {days} days ago and the tracking page has not "
         "changed since. Can you tell me when it will arrive?",
         "I ordered a {product} (order {order}) and it still has not shipped after {days} days. If it cannot ship "
         "this week I would like to cancel.",
         "Order {order} has been stuck on processing for {days} days. I need the {product} before the weekend, "
         "please check with the courier.")),
    "refund": (
        ("Refund not received", "Refund for order {order}", "Still waiting for my money"),
        ("I returned the {product} from order {order} and I am still waiting for the refund of ${amount}. Please "
         "send it to my bank account {account}.",
         "The courier picked up my {product} return {days} days ago but the ${amount} for order {order} has not "
         "been refunded. My bank account is {account}.",
         "You confirmed my return of the {product} (order {order}) but no refund of ${amount} has arrived. Can you "
         "pay it into account {account} instead of the card?")),
    "pairing": (
        ("{product} will not connect", "Pairing problem", "Device offline"),
        ("My new {product} will not pair with the Nimbra app. The light keeps blinking {colour} and the app says "
         "no device was found.",
         "I reset the {product} three times but it drops off the wifi every night and the app shows it as offline.",
         "After the last app update my {product} shows a {colour} light and cannot be added to my home. Order "
         "{order}, bought {days} days ago.")),
    "billing": (
        ("Charged twice", "Double payment on order {order}", "Wrong amount charged"),
        ("I was charged twice for order {order}: two payments of ${amount} on my card ending {card4}. Please "
         "refund one of them.",
         "My card ending {card4} shows ${amount} taken twice for the {product}. Order {order}.",
         "The invoice for order {order} says ${amount} but my card ending {card4} was charged more than that.")),
    "address": (
        ("Change delivery address", "New address for order {order}", "Wrong address on my order"),
        ("Please change the delivery address of order {order} to {address}. The {product} has not shipped yet.",
         "I moved last week; my new address is {address}. Can you update order {order} before it ships?",
         "Order {order} was sent to my old flat. The right address is {address}, please redirect the {product}.")),
    "warranty": (
        ("Warranty claim", "{product} stopped working", "Broken {product}"),
        ("The {product} I bought {months} months ago stopped turning on. Is it still under warranty? Order "
         "number {order}.",
         "My {product} makes a clicking noise and gets hot. It is {months} months old (order {order}); I would "
         "like a replacement under the warranty.",
         "The screen of my {product} went blank after {months} months. Can I send it back under warranty? It was "
         "order {order}.")),
    "login": (
        ("Cannot log in", "Password reset not arriving", "Locked out of the app"),
        ("I cannot log in to the Nimbra app with {email}; the reset email never arrives and my {product} is "
         "stuck offline.",
         "The app says my account {email} is locked after too many attempts. I only typed my password twice.",
         "I changed phones and now the Nimbra app does not accept my login {email}. Order {order} is on this "
         "account.")),
}
LAUNCH_ISSUES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "pre-order": (
        ("Aura pre-order not shipped", "Where is my Aura?", "Launch day pre-order {order}"),
        ("I pre-ordered the Nimbra Aura on launch day (order {order}) and it still has not shipped, while friends "
         "who ordered after the launch already have theirs.",
         "My Aura pre-order {order} says dispatched for {days} days but the courier has no record of the launch "
         "parcel.",
         "The Aura launch page promised delivery on release day. Pre-order {order} has not even left the "
         "warehouse.")),
    "bundle": (
        ("Launch bundle code not applied", "AURA20 discount missing", "Aura bundle price"),
        ("The launch bundle code AURA20 was not applied to my Aura pre-order {order}; I paid ${amount} instead "
         "of the bundle price.",
         "I bought the Aura launch bundle with a {product} but was charged the full ${amount} on my card ending "
         "{card4}.",
         "Your launch email said the Aura bundle includes a free {product}, but order {order} only had the Aura.")),
    "firmware": (
        ("Firmware 6.0 broke my hub", "Aura will not join the mesh", "Problem after firmware 6.0"),
        ("Since the firmware 6.0 update my Nimbra Aura will not join the mesh with my {product}; the Aura ring "
         "stays {colour}.",
         "Firmware 6.0 installed overnight and now my {product} and the new Aura lose the mesh every hour.",
         "After updating to firmware 6.0 for the Aura launch, Aura Voice stopped controlling my {product}.")),
    "voice": (
        ("Aura Voice does not understand me", "Spatial audio problem", "Aura speaker issue"),
        ("Aura Voice does not understand my commands when spatial audio is on, and the Aura plays music in the "
         "wrong room.",
         "The spatial audio calibration on my new Aura fails at the last step every time. Pre-order {order}.",
         "My Aura answers every question with the launch tutorial instead of turning on the {product}.")),
}
COLOURS = ("red", "orange", "white", "blue")
FOLLOW_UP_OPENING = "This is my second message about this."
FOLLOW_UP_SENTENCES = (  # a long ticket adds its opening and a sentence of two of these groups
    ("I first wrote {days} days ago and was told it would be sorted within a week.",
     "Your colleague promised a call back {days} days ago and nobody called.",
     "I opened a chat {days} days ago and the agent closed it without an answer.",
     "The automatic reply {days} days ago said someone would contact me within 48 hours.",
     "I have now waited {days} days, which is longer than the delivery itself was meant to take."),
    ("I have already restarted the {product}, reinstalled the app and moved it next to the router.",
     "I tried a factory reset twice and a different power socket for the {product}.",
     "My neighbour has the same {product} and hers works, so it is not my wifi.",
     "I followed every step of the troubleshooting page for the {product}, including the long reset.",
     "I even bought a new router last month, and the {product} is the only device with problems."),
    ("I have been a Nimbra customer for {years} years with {count} devices in the house.",
     "We have {count} Nimbra devices at home and this is the first time I have needed support.",
     "I recommended Nimbra to {count} friends over the last {years} years.",
     "My family relies on the {product} because my father lives with us and uses it every day.",
     "I run a small guest house and {count} of my rooms use Nimbra devices."),
    ("I would really like this solved without sending it back.",
     "If this is not fixed by Friday I will ask my bank to reverse the payment.",
     "Please escalate this to a manager, I do not want another template answer.",
     "A replacement would be fine, as long as it ships this week.",
     "I am close to leaving a one-star review, which I would rather not do."),
)
_EDITS = (  # the small edits that make a near-duplicate: each maps the ticket text to a slightly different one
    lambda text, rng: text.replace("This is my second message", "This is my third message", 1),
    lambda text, rng: text.replace("Subject: ", "Subject: Re: ", 1),
    lambda text, rng: text + "\nP.S. Please reply soon.",
    lambda text, rng: _swap_greeting(text, rng),
    lambda text, rng: text.replace(" days ago", " days ago now", 1),
)


@dataclass(frozen=True)
class Ticket:
    """One support ticket and what the generator knows about it (ground truth for an audit's findings)."""

    text: str
    month: str  # "current" or "next"
    issue: str  # a key of ISSUES or LAUNCH_ISSUES
    customer: str
    email: str
    order: str
    unusual_name: bool  # the customer's name comes from the rare-name lists
    duplicate_group: int | None = None  # tickets of one group are near-duplicates of each other
    launch: bool = False  # about the next month's product launch


def tickets(limit: int | None = None, *, seed: int = 0, month: str = "current", size: int | None = None) -> list[str]:
    """Synthetic support tickets (licence: generated here) of one month, seeded; see `generate_tickets`."""
    texts = [ticket.text for ticket in generate_tickets(seed=seed, month=month, size=size)]
    return texts if limit is None else texts[:limit]


def generate_tickets(*, seed: int = 0, month: str = "current", size: int | None = None) -> list[Ticket]:
    """The tickets of `month` ("current" or "next"), in a seeded random order; the same seed gives the same tickets.

    `size` ordinary tickets (default `N_TICKETS[month]`); the current month adds the near-duplicates' copies,
    about 12 per 100 tickets (5 % of them sent 2 or 3 more times). Both months draw from separate streams of
    one seed, so the next month is new text, not a reshuffle. Take a month whole (`size`), not cut (`limit`), to
    keep its near-duplicate groups.
    """
    if month not in MONTHS:
        raise DataError(f"tickets: month={month!r} is not one of {MONTHS}; 'next' is the month of the launch")
    if not isinstance(seed, int) or seed < 0:
        raise DataError(f"tickets: seed={seed!r} must be a non-negative integer")
    size = N_TICKETS[month] if size is None else size
    if not isinstance(size, int) or not 1 <= size <= MAX_SIZE:
        raise DataError(f"tickets: size={size!r} must be a number of tickets from 1 to {MAX_SIZE:,} (beyond, the "
                        "unusual names would repeat)")
    rng = np.random.default_rng([seed, MONTHS.index(month)])
    customers = _customers(rng, size)
    launch = month == "next"
    found: list[Ticket] = []
    for _ in range(size):
        about_launch = launch and rng.random() < LAUNCH_SHARE
        found.append(_ticket(rng, customers[rng.integers(len(customers))], month, about_launch))
    if not launch:
        found += _near_duplicates(rng, found)
    return [found[i] for i in rng.permutation(len(found))]


@dataclass(frozen=True)
class _Customer:
    name: str
    email: str
    phone: str
    address: str
    unusual: bool


def _customers(rng: np.random.Generator, n_tickets: int) -> list[_Customer]:
    """0.8 customers per ticket, so some customers write several; `UNUSUAL_NAME_SHARE` of them with unusual names."""
    n_customers = max(1, int(0.8 * n_tickets))
    unusual_flags = rng.permutation(np.arange(n_customers) < max(1, round(UNUSUAL_NAME_SHARE * n_customers)))
    found, unusual_names = [], set()
    for unusual in unusual_flags:
        name = _unusual_name(rng, unusual_names) if unusual else PII_FORMATS["name"].draw(rng)
        if unusual:
            unusual_names.add(name)
        address = f"{rng.integers(2, 400)} {pick(rng, STREETS)}, {pick(rng, CITIES)}"
        found.append(_Customer(name, email_for(name, rng), PII_FORMATS["phone"].draw(rng), address, bool(unusual)))
    return found


def _unusual_name(rng: np.random.Generator, taken: set[str]) -> str:
    """A rare first name and surname that no customer has yet (`MAX_SIZE` leaves enough of them)."""
    while True:
        name = f"{pick(rng, UNUSUAL_FIRST_NAMES)} {pick(rng, UNUSUAL_LAST_NAMES)}"
        if name not in taken:
            return name


def _ticket(rng: np.random.Generator, customer: _Customer, month: str, about_launch: bool) -> Ticket:
    """One ticket: a header with the customer's name and email, a greeting, the issue, contact lines, a sign-off."""
    issues = LAUNCH_ISSUES if about_launch else ISSUES
    issue = pick(rng, tuple(issues))
    subjects, bodies = issues[issue]
    product = pick(rng, tuple(PRODUCTS))
    slots = {
        "name": customer.name, "first": customer.name.split()[0], "email": customer.email,
        "phone": customer.phone, "address": customer.address, "product": product,
        "order": f"NB-{rng.integers(10**6, 10**7)}",
        "amount": LAUNCH_PRICE if issue in ("bundle", "pre-order") and rng.random() < 0.5 else PRODUCTS[product],
        "days": str(rng.integers(3, 22)), "months": str(rng.integers(2, 23)), "colour": pick(rng, COLOURS),
        "card4": PII_FORMATS["card"].draw(rng)[-4:], "account": PII_FORMATS["account"].draw(rng),
    }
    body = [pick(rng, bodies)]
    if "{order}" not in body[0]:
        body.append(pick(rng, ORDER_LINES))
    if rng.random() < 0.35:
        body.append(pick(rng, ADDRESS_LINES))
    if rng.random() < 0.35:
        body.append(pick(rng, CONTACT_LINES))
    text = "\n".join(["From: {name} <{email}>", f"Subject: {pick(rng, subjects)}", pick(rng, GREETINGS),
                      " ".join(body), pick(rng, SIGN_OFFS)])
    return Ticket(text.format(**slots), month, issue, customer.name, customer.email, slots["order"],
                  customer.unusual, launch=about_launch)


def _near_duplicates(rng: np.random.Generator, originals: list[Ticket]) -> list[Ticket]:
    """Make a share of `originals` long follow-ups (in place) and return 2 or 3 copies of each with small edits."""
    copies: list[Ticket] = []
    chosen = rng.choice(len(originals), size=round(NEAR_DUPLICATE_SHARE * len(originals)), replace=False)
    for group, index in enumerate(sorted(chosen)):
        ticket = originals[index]
        groups = rng.choice(len(FOLLOW_UP_SENTENCES), size=2, replace=False)
        follow_up = " ".join([FOLLOW_UP_OPENING, *(pick(rng, FOLLOW_UP_SENTENCES[g]) for g in groups)]).format(
            days=rng.integers(5, 15), product=named_product(ticket.text) or "Nimbra Hub", years=rng.integers(2, 9),
            count=rng.integers(3, 12))
        body, _, sign_off = ticket.text.rpartition("\n")
        long = Ticket(f"{body} {follow_up}\n{sign_off}", ticket.month, ticket.issue, ticket.customer,
                      ticket.email, ticket.order, ticket.unusual_name, duplicate_group=group)
        originals[index] = long  # the original becomes the group's first copy
        texts, n_copies = {long.text}, rng.integers(2, 4)
        while len(texts) < 1 + n_copies:
            edited = long.text
            for edit in rng.choice(len(_EDITS), size=rng.integers(1, 3), replace=False):
                edited = _EDITS[edit](edited, rng)
            if edited not in texts:
                texts.add(edited)
                copies.append(Ticket(edited, long.month, long.issue, long.customer, long.email, long.order,
                                     long.unusual_name, duplicate_group=group))
    return copies


def named_product(text: str) -> str | None:
    """The product a ticket's text names (the first of `PRODUCTS` found), or None if it names none."""
    return next((p for p in PRODUCTS if p in text), None)


def _swap_greeting(text: str, rng: np.random.Generator) -> str:
    """The text with its greeting (its third line) replaced by another one."""
    lines = text.split("\n")
    others = [g for g in GREETINGS if g != lines[2]]
    lines[2] = others[rng.integers(len(others))]
    return "\n".join(lines)


def pick(rng: np.random.Generator, options: Sequence[str]) -> str:
    """One of `options`, drawn uniformly by `rng`."""
    return options[rng.integers(len(options))]
