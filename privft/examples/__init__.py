"""Runnable walk-throughs: `privft example support-tickets` (seed 000's release decision, measured)."""

from privft.examples.support_tickets import SCALES, TicketScale, TicketWalkthrough, run_support_tickets

__all__ = ["SCALES", "TicketScale", "TicketWalkthrough", "run_support_tickets"]
