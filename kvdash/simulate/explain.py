"""What each simulated share counts, what the PagedAttention paper's Figure 2 counts, and why the two
differ where they do; printed by ``kvdash simulate`` and the sweep report beside the figures."""

from __future__ import annotations

from typing import Any

PAPER = "PagedAttention paper (Kwon et al., SOSP 2023)"

SHARE_MEANING = {
    "token_states": "slots holding a token's keys and values (prompt and generated so far)",
    "reservation": "slots a contiguous request reserved for tokens it has yet to generate",
    "internal_fragmentation": ("slots held that will never hold a token: reservation beyond the final length "
                               "(Max up to the maximum length, Pow2 up to a power of two, buddy rounding) and "
                               "the unfilled tail of each request's last block (paged)"),
    "external_fragmentation": "free slots while the queue's head cannot be placed (contiguous: no hole fits it)",
    "free": ("free slots while nothing waits, and (paged) free blocks too few for the queue's head, which "
             "is a shortage, not fragmentation"),
}

PAPER_OTHERS = ("the paper's fourth share, 'external fragmentation & others', is whatever is neither token "
                "states, reservation nor internal fragmentation; it compares with kvdash's external "
                "fragmentation plus free (the 'ext.+free' column)")


def gap_notes(policy: str, allocator: str, synthetic: bool, shares: dict[str, float]) -> list[str]:
    """Why this policy's shares differ from the paper's, as far as the simulation can tell."""
    lengths = ("synthetic lognormal lengths with the paper's means stand in for real ShareGPT/Alpaca requests"
               if synthetic else "the lengths are yours, not the paper's datasets")
    notes: list[str] = []
    if policy == "max":
        notes.append("Max reserves the maximum length for every request, so its batch is capped at pool // "
                     "max length (15,728 // 2,048 = 7 at the paper's setup) whatever the lengths; its shares "
                     "depend on the lengths only through the mean")
    elif policy == "pow2":
        notes.append(f"Pow2's rounding waste depends on where each output length falls between two powers of two: "
                     f"{lengths}")
        notes.append("the paper's 41.6 % external & others is larger than the simulated external + free; the "
                     "paper does not break that share down, so its 'others' (memory its Orca reimplementation "
                     "left idle for reasons other than placement) is not modelled")
    elif policy == "oracle":
        if allocator == "buddy":
            notes.append("under a buddy allocator Oracle's exact reservation is rounded up to the next power of "
                         "two, which is Pow2's reservation (every final length is at most the maximum length), so "
                         "the two policies coincide; the paper's Oracle has 0 internal fragmentation, so compare "
                         "with --allocator first-fit")
        notes.append("Oracle's external share depends on how lengths pack into holes: " + lengths)
    elif policy.startswith("paged"):
        notes.append("paged wastes at most one block tail per request; the rest of the gap to 100 % is free "
                     "blocks left when the queue's head needs more than remain (a shortage) and the steps "
                     "while the pool fills and drains")
    if shares.get("free", 0.0) > 5:
        notes.append(f"{shares['free']:.1f} % free: the pool was not saturated at this rate for part of the run "
                     "(the paper's figures come from saturated runs)")
    return notes


def comparison(policy: str, allocator: str, synthetic: bool, shares: dict[str, float],
               paper: tuple[float | None, ...] | None) -> dict[str, Any]:
    """The simulated shares beside the paper's, with the gaps and their causes."""
    ext_free = shares["external_fragmentation"] + shares["free"]
    out: dict[str, Any] = {"policy": policy, "ext_plus_free": ext_free, "notes": gap_notes(policy, allocator,
                                                                                       synthetic, shares)}
    if paper is not None:
        keys = ("token_states", "reservation", "internal_fragmentation")
        diffs = {k: shares[k] - p for k, p in zip(keys, paper[:3], strict=True) if p is not None}
        if paper[3] is not None:
            diffs["ext_plus_free"] = ext_free - paper[3]
        out["minus_paper"] = diffs
    return out
