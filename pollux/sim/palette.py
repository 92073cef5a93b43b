"""One colour per policy in every picture of a simulation: the PNG plots (`pollux.sim.report`) and report.html
(whose data carries each policy's colour, `pollux.sim.report_html`) take their colours from `policy_colors` and
from nowhere else, so a policy looks the same in both, and in every run.

The colours are Okabe and Ito's qualitative palette, chosen to stay apart for the common colour-vision deficiencies
(https://jfly.uni-koeln.de/color/), with its yellow swapped for a grey: a thin yellow line is lost on white; a ninth
policy takes the wine of Paul Tol's muted scheme, darker than any of those, a tenth its olive, an eleventh its indigo.
"""

from __future__ import annotations

from collections.abc import Iterable

BLACK, ORANGE, SKY_BLUE, BLUISH_GREEN = "#000000", "#E69F00", "#56B4E9", "#009E73"
BLUE, VERMILLION, REDDISH_PURPLE, GREY = "#0072B2", "#D55E00", "#CC79A7", "#8C8C8C"
WINE, OLIVE, INDIGO = "#882255", "#999933", "#332288"
PALETTE = (BLUE, VERMILLION, BLUISH_GREEN, ORANGE, REDDISH_PURPLE, SKY_BLUE, BLACK, GREY, WINE, OLIVE, INDIGO)

# every registered policy (pollux.policies.registry.POLICIES) keeps its colour, whatever runs beside it
POLICY_COLORS: dict[str, str] = {
    "pollux": BLUE,
    "optimus": VERMILLION,
    "tiresias": BLUISH_GREEN,
    "elastic-dp": ORANGE,
    "gavel": REDDISH_PURPLE,
    "pollux-unaware": SKY_BLUE,
    "fifo": BLACK,
    "tiresias-gittins": GREY,
    "astraea": WINE,
    "themis": OLIVE,
    "shockwave": INDIGO,
}


def policy_colors(policies: Iterable[str]) -> dict[str, str]:
    """The colour of each policy of a run: its own if registered; the others, by name, take the colours no policy of
    the run has (the palette again, in order, once all are taken). The same policies, in any order, get the
    same colours, whichever picture asks."""
    names = list(policies)
    colors = {name: POLICY_COLORS[name] for name in names if name in POLICY_COLORS}
    spare = [c for c in PALETTE if c not in colors.values()]
    for name in sorted(set(names) - set(colors)):
        colors[name] = spare.pop(0) if spare else PALETTE[len(colors) % len(PALETTE)]
    return {name: colors[name] for name in names}
