"""Deciding an approval card as a person does: the tick box first where the card has one."""

from __future__ import annotations

from typing import Any


def approve(card: Any) -> None:
    """Tick the card's "I have read the warning" box (when it has one), then click Approve."""
    if card.consent is not None:
        card.consent.value = True
    card.approve_button.click()
