"""What the report says about the load's own records against the store.

``abserve run`` counts the answers its clients received in full against the exchanges stored
(``abserve.runs.load_seen``, provenance ``load_seen``). The report states the count on its
first screen: all stored, how many are missing (the run is then invalid,
``compare.verdict.invalid_reasons``), or that no count was available (a run without load
records: the router run by hand, a compose run of an earlier version, a saved run of
``abserve compare``, an older store) — which is never a reason for invalid on its own.
Pure: everything comes from the ``Judgment`` (``provenance.load_seen``, a ``LoadSeenRecord``).
"""

from __future__ import annotations

from abserve.compare.model import Judgment

NOT_AVAILABLE = ("not available: the run left no load records to count (a router run by hand, "
                 "a saved run, or an older store)")


def load_seen_statement(j: Judgment) -> tuple[str, bool]:
    """The sentence on the load's answers against the store, and whether any are missing."""
    facts = j.provenance.load_seen
    if facts is None:
        return NOT_AVAILABLE, False
    seen, stored, missing = facts.seen, facts.stored, facts.missing
    if missing:
        named = ", ".join(facts.first_missing)
        text = (f"{missing} of the {seen} answers the clients received in full are not in the "
                f"store ({stored} stored)" + (f"; first missing request ids: {named}" if named else ""))
    else:
        text = f"all {seen} answers the clients received in full are in the store"
    if without := facts.without_id:
        text += f"; {without} more carried no router request id and could not be checked"
    return text + ".", bool(missing)
